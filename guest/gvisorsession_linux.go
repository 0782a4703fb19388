package guest

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/wire"
)

// startGVisor prepares a session inside gVisor: the container's root is
// the view the host built (its writes land in upper dirs on the host side),
// and the workspace is a tmpfs of gVisor's own, mounted over the view's
// path, with its baseline beside it on the same tmpfs, compared by scanning
// (scan staging, as on the host rung: gVisor's overlay cannot rename a
// directory of its lower, which the workspace must). The baseline has no
// path once the session runs: the guest reaches it through a descriptor
// (/proc/self/fd/N), which a command, in a user namespace of its own,
// cannot open.
func (s *session) startGVisor() error {
	if s.cfg.Hostname != "" {
		unix.Sethostname([]byte(s.cfg.Hostname))
	}
	s.ws = s.cfg.Workspace
	if s.ws == "" {
		s.ws = "/workspace"
	}
	layers := ""
	for _, c := range scratchCandidates {
		if st, err := os.Lstat(c); err == nil && st.IsDir() {
			layers = c
			break
		}
	}
	if layers == "" {
		return fmt.Errorf("no directory to mount the workspace's tmpfs on")
	}
	opts := "mode=0755"
	if s.cfg.UpperSize > 0 {
		opts += ",size=" + strconv.FormatInt(s.cfg.UpperSize, 10)
	}
	if err := unix.Mount("dryexec-ws", layers, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mounting the workspace's tmpfs: %w", err)
	}
	fd, err := unix.Open(layers, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the workspace's tmpfs: %w", err)
	}
	for _, d := range []string{"ws", "base"} {
		if err := os.Mkdir(layers+"/"+d, 0o755); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(s.ws, 0o755); err != nil {
		return fmt.Errorf("creating the workspace mount point: %w", err)
	}
	if err := unix.Mount(layers+"/ws", s.ws, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("mounting the workspace: %w", err)
	}
	if err := unix.Unmount(layers, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the workspace's tmpfs: %w", err)
	}
	// The guest is PID 1 of the sandbox, and its commands run as uid 0
	// (in user namespaces of their own), which may signal it. PID 1 gets
	// from its own namespace only the signals it handles: handled here,
	// and dropped, none ends it. Handled, not ignored: a handled signal is
	// reset to its default in a child, an ignored one stays ignored in
	// every command.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, guestIgnored...)
	go func() {
		for range sigs {
		}
	}()
	s.platform = &sessionPlatform{}
	if err := s.gvisorLauncher(); err != nil {
		return err
	}
	// fd stays open for the session's life: the baseline's only way in.
	st, err := newScanStaging(s.ws, "/proc/self/fd/"+strconv.Itoa(fd)+"/base")
	if err != nil {
		return err
	}
	if err := st.reindex(); err != nil {
		return err
	}
	s.st = st
	return nil
}

// gvisorLauncher starts the launcher every exec starts from: a thread under
// the gvisor trial command's seccomp profile (no signal to PID 1 by any
// call, which handling cannot stop for SIGKILL and SIGSTOP: gVisor delivers
// them to its init from inside) and no_new_privs; before, an exec ran
// unfiltered and `kill -9 1` lost the session. And every exec runs in one
// pid namespace of the session's (commandPIDNS), joined on that thread
// before its filter: a later exec sees what an earlier one left running,
// and no exec can name the guest's threads. It lives as long as the
// session, or until a command ends its init (renewLauncher).
func (s *session) gvisorLauncher() error {
	var pidns *commandPIDNS
	l, err := filterLauncher(gvisorProfile(), func() error {
		var err error
		pidns, err = newCommandPIDNS(false)
		return err
	})
	if err != nil {
		pidns.close()
		return fmt.Errorf("confining the sandbox: %w", err)
	}
	s.platform.launcher, s.platform.pidns = l, pidns
	return nil
}

// renewLauncher makes a new pid namespace for the execs (and a new launcher
// for it) when the last one's init is gone: inside gVisor a command may end
// it (it is as killable as any init there); on the ns rung nothing of the
// sandbox can, but the kernel's OOM killer could. What ran in it is gone
// with it, the session goes on.
func (s *session) renewLauncher() error {
	if s.platform == nil || s.platform.pidns == nil || !s.platform.pidns.gone() {
		return nil
	}
	s.platform.launcher.stop(0)
	s.platform.pidns.close()
	s.platform.launcher, s.platform.pidns = nil, nil
	if s.cfg.Rung == "ns" {
		return s.nsLauncher()
	}
	return s.gvisorLauncher()
}

// startGVisorExec starts an exec's process inside gVisor. With a pids limit
// (CommandNPROC) the process is started traced from a thread of its own
// (the tracer must be the thread that started it), stops right after its
// execve, gets the limit as its RLIMIT_NPROC there and is let go, as on the
// ns rung's rlimit fallback: the sandbox's processes are gVisor's, which
// the host's cgroup cannot count.
func (s *session) startGVisorExec(cmd *exec.Cmd) error {
	if s.platform != nil && s.platform.pidns != nil {
		if err := s.enterPIDNS(cmd); err != nil {
			return err
		}
	}
	if s.platform != nil && s.platform.launcher != nil {
		// gvisor: from the confined launcher (startGVisor), which is then
		// the tracer too.
		var err error
		if derr := s.platform.launcher.do(func() { err = s.startOwnKernelExec(cmd) }); derr != nil {
			return derr
		}
		return err
	}
	errc := make(chan error, 1)
	go func() {
		// The tracer must be the thread that started the process.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		errc <- s.startOwnKernelExec(cmd)
	}()
	return <-errc
}

// startOwnKernelExec is startGVisorExec on the calling (locked) thread.
func (s *session) startOwnKernelExec(cmd *exec.Cmd) error {
	nproc := s.cfg.CommandNPROC
	if nproc == 0 {
		if err := cmd.Start(); err != nil {
			return err
		}
		// Untraced, the exec runs already: what it allocated before this
		// is at most its first pages.
		if err := s.unprotectExec(cmd); err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			return err
		}
		return nil
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Ptrace = true
	if err := cmd.Start(); err != nil {
		return err
	}
	// Stopped at its execve's trap: nothing of the exec ran yet.
	err := s.unprotectExec(cmd)
	if err == nil {
		err = takeFirstStop(cmd.Process.Pid, nproc)
	}
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return fmt.Errorf("limiting the exec's processes: %w", err)
	}
	return nil
}

// streamFork (gvisor) sends the workspace and then its baseline to the host
// as fork.data calls, each tree one tar stream, for branches the host
// pushes them into: a branch is a gVisor sandbox of its own, whose kernel
// cannot reach this one's tmpfs, so there is no layer to share as on ns.
// The caller stopped every other process of the session, so the trees are
// as they were at the call.
func (s *session) streamFork(ctx context.Context, out *wire.Forked) error {
	st, ok := s.st.(*scanStaging)
	if !ok {
		return fmt.Errorf("the %s staging cannot stream its trees", s.st.name())
	}
	w := &forkSender{ctx: ctx, peer: s.peer}
	if err := writeTreeTar(w, st.wsR); err != nil {
		return fmt.Errorf("sending the workspace: %w", err)
	}
	out.TreeBytes = w.n + int64(len(w.buf))
	if err := writeTreeTar(w, st.baseR); err != nil {
		return fmt.Errorf("sending the baseline: %w", err)
	}
	if err := w.flush(); err != nil {
		return fmt.Errorf("sending the baseline: %w", err)
	}
	out.StreamBytes = w.n
	return nil
}

// forkSender is an io.Writer that sends what is written to the host as
// fork.data calls, forkSendChunks attachments at a time.
type forkSender struct {
	ctx  context.Context
	peer *wire.Peer
	buf  []byte
	n    int64 // bytes sent
}

// forkSendChunks bounds the guest's buffer (gVisor's memory, charged to
// the sandbox) at 16 MiB, sixteen 1 MiB attachments a call.
const forkSendChunks = 16

func (w *forkSender) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 {
		if w.buf == nil {
			w.buf = make([]byte, 0, forkSendChunks*wire.MaxAttachment)
		}
		k := min(len(p), cap(w.buf)-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == cap(w.buf) {
			if err := w.flush(); err != nil {
				return total - len(p), err
			}
		}
	}
	return total, nil
}

func (w *forkSender) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	var bin [][]byte
	for b := w.buf; len(b) > 0; {
		k := min(len(b), wire.MaxAttachment)
		bin = append(bin, b[:k])
		b = b[k:]
	}
	if _, err := w.peer.Call(w.ctx, wire.VerbForkData, nil, bin...); err != nil {
		return err
	}
	w.n += int64(len(w.buf))
	w.buf = w.buf[:0]
	return nil
}

// writeTreeTar writes dir's contents as a tar stream of what copyRoot
// copies (directories, symlinks, regular files with their modes and
// mtimes; nothing else), which extractRoot makes again: a branch's trees
// are what the scan staging's own copies of a tree would be. dir is the
// staging's held root: the path a staging was opened by need not name the
// same directory now (the baseline's is a /proc/self/fd path), and a walk
// by path could be led out by a symlink a process swaps in.
func writeTreeTar(w io.Writer, dir *os.Root) error {
	tw := tar.NewWriter(w)
	err := fs.WalkDir(dir.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		info, err := dir.Lstat(p)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: p, Mode: int64(info.Mode().Perm()), ModTime: info.ModTime(), Format: tar.FormatPAX}
		switch {
		case info.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case info.Mode()&fs.ModeSymlink != 0:
			h.Typeflag = tar.TypeSymlink
			if h.Linkname, err = dir.Readlink(p); err != nil {
				return err
			}
		case info.Mode().IsRegular():
			h.Typeflag, h.Size = tar.TypeReg, info.Size()
		default:
			return nil
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag != tar.TypeReg {
			return nil
		}
		f, err := dir.OpenFile(p, os.O_RDONLY|oNoFollow, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.CopyN(tw, f, h.Size)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
