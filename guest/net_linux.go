package guest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/netsim/tun"
	"github.com/dryexec/dryexec/wire"
)

// sendTUN creates the sandbox's TUN device in this (the sandbox's) network
// namespace, with its addresses and default routes, and hands it to the host,
// where netsim serves it. It runs before the view is built: /dev/net/tun is
// the host's /dev until then. The guest keeps no copy, so no process in the
// sandbox can reach the device's other side. With cfg.NetLazy it hands the
// device over later (handTUNLazily) and returns what holds it until then.
func sendTUN(cfg *wire.TrialStart) (*lazyTUN, error) {
	if !cfg.Net || cfg.NetFilesOnly {
		return nil, nil
	}
	sock := os.NewFile(uintptr(cfg.NetFD), "net")
	c, err := net.FileConn(sock)
	sock.Close()
	if err != nil {
		return nil, fmt.Errorf("net socket: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("net socket: fd %d is not a unix socket", cfg.NetFD)
	}
	dev, err := tun.SetupTUN(tun.DeviceName)
	if err != nil {
		c.Close()
		return nil, err
	}
	t := &lazyTUN{dev: dev, sock: uc}
	if !cfg.NetLazy {
		return nil, t.hand()
	}
	// Persistent while the guest holds it, so that the guest's exit does
	// not wait for the device's removal (tun.SetPersist): it goes with the
	// sandbox's network namespace instead. No sandbox process can tell:
	// the guest holds the device for as long as any of them lives. hand
	// turns it back before netsim gets it.
	if err := tun.SetPersist(dev, true); err != nil {
		dev.Close()
		c.Close()
		return nil, err
	}
	t.persist = true
	go t.watch()
	return t, nil
}

// lazyTUN holds the sandbox's TUN device in the guest until it has a packet
// to read (wire.TrialStart.NetLazy): the host starts netsim only then, so a
// trial that sends nothing pays for no netsim process. The guest is PID 1
// of the sandbox and no sandbox process can reach its descriptors, as for
// the stream to the host it holds anyway.
type lazyTUN struct {
	mu      sync.Mutex
	dev     *os.File
	sock    *net.UnixConn
	sent    bool
	persist bool // tun.SetPersist is on (see sendTUN)
}

// watch hands the device over once a packet waits on it. It blocks a
// thread in poll(2) until then, or until the guest exits.
func (t *lazyTUN) watch() {
	fds := []unix.PollFd{{Fd: int32(t.dev.Fd()), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, -1)
		if err == unix.EINTR || (err == nil && n == 0) {
			continue
		}
		break
	}
	t.hand() // a failure ends the sandbox's network: the host sees the socket end
}

// flush hands the device over if a packet waits on it. The guest calls it
// once no sandbox process can send any more and before trial.exit, so that
// the host, reading trial.exit, finds the device on its socket if the
// trial sent anything at all, and netsim logs it.
func (t *lazyTUN) flush() error {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	sent := t.sent
	t.mu.Unlock()
	if sent {
		return nil
	}
	fds := []unix.PollFd{{Fd: int32(t.dev.Fd()), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, 0); err != nil || n == 0 {
		return err
	}
	return t.hand()
}

// hand sends the device to the host, once, and closes the guest's copy.
func (t *lazyTUN) hand() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sent {
		return nil
	}
	t.sent = true
	defer t.sock.Close()
	defer t.dev.Close()
	// netsim's device is not persistent: if netsim dies, the device goes
	// with it and the sandbox's connections fail at once (no route) rather
	// than hang on a link nobody reads.
	if t.persist {
		if err := tun.SetPersist(t.dev, false); err != nil {
			return fmt.Errorf("handing the TUN device to the host: %w", err)
		}
	}
	if err := tun.SendFD(t.sock, t.dev); err != nil {
		return fmt.Errorf("handing the TUN device to the host: %w", err)
	}
	return nil
}

// writeNetFile writes data to path, read-only, after the content of the
// host file system when that is set: the host's trust roots, which the
// guest reads itself before it enters the view (wire.TrialStart.TrustSystem)
// and copies within the kernel; a missing one is none, and a newline goes
// between them if the roots do not end with one, as netsim's CA.Bundle
// does.
func writeNetFile(path, system string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return err
	}
	if system != "" {
		if err := appendFile(f, system); err != nil {
			f.Close()
			return fmt.Errorf("copying the host's trust roots %s: %w", system, err)
		}
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// appendFile copies the file at src (none if it does not exist) to the end
// of f, and a newline if it does not end with one.
func appendFile(f *os.File, src string) error {
	s, err := os.Open(src)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer s.Close()
	n, err := copyInKernel(f, s)
	if err != nil || n == 0 {
		return err
	}
	var last [1]byte
	if _, err := s.ReadAt(last[:], n-1); err != nil {
		return err
	}
	if last[0] != '\n' {
		_, err = f.Write([]byte{'\n'})
	}
	return err
}

// copyInKernel copies s, from its offset to its end, to f, within the
// kernel. Why not io.Copy: its copy_file_range fails across file systems
// (EXDEV), and the host's roots (ext4, an overlay) and the scratch (tmpfs)
// are two, so it copied 32 KiB at a time through this process: ≈ 0.6 ms of
// a cold trial for Debian's ≈ 250 KiB of roots here. sendfile copies
// between any two files; where it cannot (a file system without
// splice_read), the rest goes through io.Copy.
func copyInKernel(f, s *os.File) (int64, error) {
	var n int64
	for {
		m, err := unix.Sendfile(int(f.Fd()), int(s.Fd()), nil, 1<<20)
		if m > 0 {
			n += int64(m)
		}
		switch {
		case err == unix.EINTR || err == unix.EAGAIN:
		case err != nil:
			r, err := io.Copy(f, s)
			return n + r, err
		case m == 0:
			return n, nil
		}
	}
}

// bindNetFiles binds netsim's resolv.conf and trust bundle, read-only, over the
// view's own (root is the view, not yet pivoted into; scratch holds the
// files). Paths are resolved inside the view, so a symlinked /etc/resolv.conf
// (systemd's) is followed to its target in the view, never on the host. A
// path the view does not have is skipped: there is nothing to replace.
func bindNetFiles(cfg *wire.TrialStart, scratch, root string) error {
	if !cfg.Net {
		return nil
	}
	if err := os.Mkdir(scratch+"/net", 0o755); err != nil {
		return err
	}
	type netFile struct {
		path string
		data []byte
		// system, when set, is the host file whose content goes before
		// data (trustBundle).
		system string
	}
	files := []netFile{{path: "/etc/resolv.conf", data: tun.ResolvConf()}}
	switch {
	case cfg.TrustPath != "" && cfg.TrustSystem != "" && len(cfg.TrustCA) > 0:
		files = append(files, netFile{cfg.TrustPath, cfg.TrustCA, cfg.TrustSystem})
	case cfg.TrustPath != "" && len(cfg.TrustBundle) > 0:
		files = append(files, netFile{path: cfg.TrustPath, data: cfg.TrustBundle})
	}
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(rootFD)
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	for i, f := range files {
		src := fmt.Sprintf("%s/net/%d", scratch, i)
		if err := writeNetFile(src, f.system, f.data); err != nil {
			return err
		}
		dst, err := unix.Openat2(rootFD, f.path[1:], how)
		if err != nil {
			if err == unix.ENOENT {
				continue
			}
			return fmt.Errorf("opening %s in the view: %w", f.path, err)
		}
		err = unix.Mount(src, fmt.Sprintf("/proc/self/fd/%d", dst), "", unix.MS_BIND, "")
		unix.Close(dst)
		if err != nil {
			return fmt.Errorf("binding netsim's %s: %w", f.path, err)
		}
		// The descriptor still names the file beneath the new mount: look the
		// path up again to reach the mount and make it read-only.
		dst, err = unix.Openat2(rootFD, f.path[1:], how)
		if err != nil {
			return fmt.Errorf("reopening %s in the view: %w", f.path, err)
		}
		err = unix.Mount("", fmt.Sprintf("/proc/self/fd/%d", dst), "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "")
		unix.Close(dst)
		if err != nil {
			return fmt.Errorf("making netsim's %s read-only: %w", f.path, err)
		}
	}
	return nil
}
