package vm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/rung/vm/firecracker"
	"github.com/dryexec/dryexec/wire"
)

// A trial or a session on an OCI image runs on Firecracker when the rung
// chose it (chooseVMM): the kernel and the rung's initramfs as the boot
// source, the image's erofs as a read-only drive and, for a trial, the
// upper drive as a second, and a vsock device for the wire (the init
// listens on it: wire.VMVsockParam). Everything else is the QEMU image
// trial's or session's: the view guest builds the host's upper dir,
// becomes the VMM (here firecracker, from its scratch dir, in the trial's
// cgroup and with no network of its own), the host reads the upper drive
// once the VMM has ended, and the delta is built by the same code. A
// session parks by Firecracker's snapshot (fcSave) and resumes in a new
// Firecracker loading it. What stays on QEMU, and why, is fcNotFor's.

// fcState is what a trial on Firecracker holds beyond a QEMU trial's.
type fcState struct {
	machine *firecracker.Machine
	// dir holds the API's and the vsock's sockets: the upper drive's
	// private temp dir for a trial, one of the session's own (removed
	// with it) for a session.
	dir, ownDir string
	// ends are the VMM's ends of the wire's socket pairs (on QEMU, its
	// chardevs' descriptors); here each is relayed to its vsock stream.
	ends    []net.Conn
	streams []firecracker.Stream
	relays  sync.WaitGroup
}

// fcNotFor says why t's VM runs on QEMU though Firecracker was chosen, or
// "" when it runs on Firecracker.
func (t *trial) fcNotFor() string {
	switch {
	case t.saved != nil && t.saved.vmm == VMMQEMU:
		return "this session was parked on QEMU, which alone can restore its saved state"
	case t.erofs == "" && t.session:
		return "sessions on the host's view run on QEMU: Firecracker has neither 9p nor virtio-fs to give the VM the view"
	case t.erofs == "":
		return "trials on the host's view run on QEMU: Firecracker has neither 9p nor virtio-fs to give the VM the view"
	case slices.ContainsFunc(t.Spec.Net, func(s string) bool { return s != "none" }) && t.session:
		return "sessions with a network run on QEMU: Firecracker's NIC is a host TAP device, which netsim is not wired to"
	case slices.ContainsFunc(t.Spec.Net, func(s string) bool { return s != "none" }):
		return "trials with a network run on QEMU: Firecracker's NIC is a host TAP device, which netsim is not wired to"
	}
	return ""
}

// settleVMM decides t's VMM once what it runs is known (after openImage):
// Firecracker, where chosen, for an image trial or session whose network
// is none (a session parked on QEMU excepted);
// QEMU otherwise, saying why in the delta's note. Firecracker named
// outright falls back too: no VMM but QEMU can run those. On QEMU "none"
// is netsim blocking and logging every attempt behind the VM's NIC; the
// Firecracker VM has no NIC at all, so an attempt fails in the VM and is
// not logged: the note says so.
func (t *trial) settleVMM() {
	c := &t.m.vmm
	if c.name != VMMFirecracker {
		return
	}
	if why := t.fcNotFor(); why != "" {
		c.name, c.why = VMMQEMU, "firecracker chosen ("+c.why+"), but "+why
		return
	}
	c.why += "; the VM has no network device, so its attempts to reach the network fail in it and are not logged"
	t.fc = &fcState{}
}

// fcExtraFiles are the view guest's inherited files on Firecracker: not
// the VMM's ends of the ports (the host relays them, fcRelay), so that
// firecracker holds no copy that would keep a stream open.
func (t *trial) fcExtraFiles(files []*os.File, vmm []*os.File) ([]*os.File, error) {
	if t.fc == nil {
		return files, nil
	}
	for i, f := range vmm {
		c, err := net.FileConn(f)
		if err != nil {
			return nil, fmt.Errorf("the wire's relay: %w", err)
		}
		t.fc.ends = append(t.fc.ends, c)
		files[1+i] = nil
	}
	return files, nil
}

// fcSockMax is the longest socket path the kernel takes (sun_path).
const fcSockMax = 107

// bootFirecracker has the view guest become firecracker (its API socket
// and the vsock's beside the upper drive, in the trial's private temp
// dir), configures and starts the VM over the API, and connects the wire
// over vsock, each stream relayed to the host's port. The boot's own
// bound applies; the trial's ctx kills the view guest, which ends the
// API's calls too.
func (t *trial) bootFirecracker() error {
	ctx, cancel := context.WithTimeout(context.Background(), t.r.bootTimeout())
	defer cancel()
	if err := t.fcDir(); err != nil {
		return err
	}
	api, vsock := filepath.Join(t.fc.dir, "api"), filepath.Join(t.fc.dir, "vsock")
	if len(vsock) > fcSockMax {
		return fmt.Errorf("firecracker's sockets: %s is longer than a socket path may be (%d bytes); use a shorter DRYEXEC_HOME", vsock, fcSockMax)
	}
	bin, err := filepath.Abs(t.m.vmm.firecracker)
	if err != nil {
		return err
	}
	spec := firecracker.LaunchSpec{Binary: bin, APISock: api}
	opt := firecracker.Options{Launcher: viewLauncher{t}, StartTimeout: t.r.bootTimeout(), Log: t.r.Log}
	if t.saved != nil {
		// Firecracker reads the parked VM's files through the view
		// guest's descriptors (parkFiles), never by a name in the park's
		// writable dir; its vsock socket is bound in this run's dir.
		fd := func(i int) string { return "/proc/self/fd/" + strconv.Itoa(incomingFD()+i) }
		fm, err := firecracker.Restore(ctx, spec, firecracker.Snapshot{StatePath: fd(0), MemPath: fd(1), VsockOverride: vsock}, opt)
		if err != nil {
			return &FirecrackerError{Step: "restoring the parked VM", Err: err}
		}
		t.fc.machine = fm
	} else {
		fm, err := firecracker.Launch(ctx, spec, opt)
		if err != nil {
			return &FirecrackerError{Step: "launching", Err: err}
		}
		t.fc.machine = fm
		v := fcVM{binary: bin, kernel: t.m.kernel.Vmlinux, initramfs: t.m.initramfs, memMB: t.memMB(), cpus: 1, session: t.session}
		cfg := v.config(t.fc.dir)
		cfg.Vsock.UDSPath = vsock
		cfg.Drives = []firecracker.Drive{{DriveID: wire.VMImageSerial, PathOnHost: t.erofs, IsReadOnly: true}}
		if t.upperDrive != nil {
			cfg.Drives = append(cfg.Drives, firecracker.Drive{DriveID: wire.VMUpperSerial, PathOnHost: t.upperDrive.Name()})
		}
		if err := fm.Boot(ctx, cfg); err != nil {
			return &FirecrackerError{Step: "configuring and starting", Err: err}
		}
	}
	streams, err := t.fc.machine.Transport().Open(ctx)
	if err != nil {
		return &FirecrackerError{Step: "connecting the wire over vsock", Err: err}
	}
	t.fc.streams = streams
	for i, s := range streams {
		t.fcRelay(t.fc.ends[i], s)
	}
	return nil
}

// fcRelay copies between the VMM's end of a port's socket pair and its
// vsock stream, both ways, passing each way's end on as a half-close:
// the host's end of stdin or of the stub's request reaches the guest as
// the end of its stream, and the guest's as the host's end of output.
func (t *trial) fcRelay(end net.Conn, s firecracker.Stream) {
	t.fc.relays.Go(func() {
		io.Copy(s, end)
		s.CloseWrite()
	})
	t.fc.relays.Go(func() {
		io.Copy(end, s)
		if cw, ok := end.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
	})
}

// closeFirecracker ends the relays and the machine (its process is the
// view guest's, ended by then or killed now) and removes its sockets.
func (t *trial) closeFirecracker() {
	if t.fc == nil {
		return
	}
	for _, c := range t.fc.ends {
		c.Close()
	}
	for _, s := range t.fc.streams {
		s.Close()
	}
	t.fc.relays.Wait()
	if t.fc.machine != nil {
		t.fc.machine.Close()
	}
	if t.fc.ownDir != "" {
		os.RemoveAll(t.fc.ownDir)
	}
}

// fcDir sets the dir of the VMM's sockets: a trial's upper drive's
// private temp dir, else a private temp dir of the session's own (not in
// /tmp, which other sandboxes see).
func (t *trial) fcDir() error {
	if t.upperDrive != nil {
		t.fc.dir = filepath.Dir(t.upperDrive.Name())
		return nil
	}
	dir, err := dryexec.PrivateTemp(os.Getenv, fcSessionDirPattern)
	if err != nil {
		return fmt.Errorf("firecracker's run dir: %w", err)
	}
	t.fc.dir, t.fc.ownDir = dir, dir
	return nil
}

// vmmName names the VM's VMM process, for what the host says of its end.
func (t *trial) vmmName() string {
	if t.fc != nil {
		return "firecracker"
	}
	return "QEMU"
}

// fcSessionDirPattern names the private temp dirs of sessions' VMMs.
const fcSessionDirPattern = "vm-fc-"

// Files of a session parked on Firecracker, in its park dir: the VM's
// state (devices, vCPUs) and its memory, as PUT /snapshot/create writes
// them; the image drive's identity is ParkImageFile, as on QEMU.
const (
	FCStateFile = "vm.fc-state"
	FCMemFile   = "vm.fc-mem"
)

// ErrParkedOnFirecracker: a session parked on Firecracker cannot resume
// where Firecracker is not chosen (or not usable for it): only a
// Firecracker loads its snapshot.
var ErrParkedOnFirecracker = errors.New("vm: the session was parked on Firecracker, which is not used here")

// ErrFirecrackerFork: a session on Firecracker does not fork with memory
// (not built: Firecracker's snapshot resets the vsock's connections, and
// the parent would have to connect its wire again).
var ErrFirecrackerFork = errors.New("vm: a session on Firecracker cannot fork with memory (not built)")

// fcSave parks the session's VM (Snapshot: quit false is refused,
// ErrFirecrackerFork): pause, a full snapshot to dir's FCStateFile and
// FCMemFile, then the VMM ended, so that a parked session holds no RAM,
// and the sandbox closed. On failure the VM runs on, as on QEMU.
func (s *sessionSandbox) fcSave(ctx context.Context, dir string, quit bool) error {
	t := s.t
	if !quit {
		return ErrFirecrackerFork
	}
	if _, ok := ctx.Deadline(); !ok {
		// Writing the VM's memory may take longer than an API call's
		// default bound; never longer than a boot.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.r.bootTimeout()+t.r.walkGrace())
		defer cancel()
	}
	files := []string{filepath.Join(dir, FCStateFile), filepath.Join(dir, FCMemFile), filepath.Join(dir, ParkImageFile)}
	fail := func(err error) error {
		for _, f := range files {
			os.Remove(f)
		}
		if m := t.fc.machine; m.State() == firecracker.InstancePaused {
			// Paused for the snapshot: let it run again, so that the
			// session goes on where it was.
			if rerr := m.Resume(context.WithoutCancel(ctx)); rerr != nil {
				err = errors.Join(err, fmt.Errorf("resuming the VM: %w", rerr))
			}
		}
		return fmt.Errorf("parking the session's VM: %w", err)
	}
	// The restored VM gets the same drive again (Resume): its memory holds
	// the erofs's metadata as its kernel read it.
	if err := writeErofsID(files[2], t.erofs); err != nil {
		return fail(err)
	}
	// Made here first, as QEMU's saved state is (O_EXCL): a name already
	// taken in the park dir (a link planted there) fails the park rather
	// than have the VMM write through it.
	for _, f := range files[:2] {
		fd, err := unix.Open(f, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return fail(&os.PathError{Op: "create", Path: f, Err: err})
		}
		unix.Close(fd)
	}
	if _, err := t.fc.machine.Park(ctx, firecracker.Snapshot{StatePath: files[0], MemPath: files[1]}); err != nil {
		return fail(err)
	}
	for _, f := range files[:2] {
		if err := syncFile(f); err != nil {
			return fail(err)
		}
	}
	s.Close()
	return nil
}

// syncFile flushes a file the VMM wrote to disk.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// viewLauncher starts firecracker as the trial's view guest becoming it
// (as it becomes QEMU): in the trial's cgroup and mount namespace, with no
// network, its output the console's.
type viewLauncher struct{ t *trial }

func (l viewLauncher) Launch(_ context.Context, spec firecracker.LaunchSpec) (firecracker.Process, error) {
	argv, err := spec.Argv()
	if err != nil {
		return nil, err
	}
	var keep []int
	if l.t.saved != nil {
		// The parked VM's state and memory files (parkFiles).
		keep = []int{incomingFD(), incomingFD() + 1}
	}
	if err := l.t.ExecView(&wire.GVisorExec{Path: argv[0], Argv: argv, Config: []byte("{}"), Keep: keep}, "firecracker"); err != nil {
		return nil, err
	}
	return viewProcess(l), nil
}

// viewProcess is the view guest become firecracker.
type viewProcess struct{ t *trial }

func (p viewProcess) Pid() int              { return p.t.Cmd.Process.Pid }
func (p viewProcess) Done() <-chan struct{} { return p.t.Waited }
func (p viewProcess) Kill() error           { p.t.Kill(); return nil }

func (p viewProcess) Err() error {
	select {
	case <-p.t.Waited:
		return p.t.WaitErr
	default:
		return nil
	}
}
