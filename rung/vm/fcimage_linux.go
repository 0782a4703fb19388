package vm

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/dryexec/dryexec/rung/vm/firecracker"
	"github.com/dryexec/dryexec/wire"
)

// A trial on an OCI image runs on Firecracker when the rung chose it
// (chooseVMM): the kernel and the rung's initramfs as the boot source,
// the image's erofs as a read-only drive and the upper drive as a second,
// and a vsock device for the wire (the init listens on it: wire.VMVsockParam).
// Everything else is the QEMU image trial's: the view guest builds the
// host's upper dir, becomes the VMM (here firecracker, from its scratch
// dir, in the trial's cgroup and with no network of its own), the host
// reads the upper drive once the VMM has ended, and the delta is built by
// the same code. What stays on QEMU, and why, is fcNotFor's.

// fcState is what a trial on Firecracker holds beyond a QEMU trial's.
type fcState struct {
	machine *firecracker.Machine
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
	case t.session:
		return "sessions run on QEMU (parking and forking are QEMU's migration; a session on Firecracker is not built)"
	case t.upperDrive == nil:
		return "trials on the host's view run on QEMU: Firecracker has neither 9p nor virtio-fs to give the VM the view"
	case slices.ContainsFunc(t.Spec.Net, func(s string) bool { return s != "none" }):
		return "trials with a network run on QEMU: Firecracker's NIC is a host TAP device, which netsim is not wired to"
	}
	return ""
}

// settleVMM decides t's VMM once what it runs is known (after openImage):
// Firecracker, where chosen, for an image trial whose network is none;
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
	dir := filepath.Dir(t.upperDrive.Name())
	api, vsock := filepath.Join(dir, "api"), filepath.Join(dir, "vsock")
	if len(vsock) > fcSockMax {
		return fmt.Errorf("firecracker's sockets: %s is longer than a socket path may be (%d bytes); use a shorter DRYEXEC_HOME", vsock, fcSockMax)
	}
	bin, err := filepath.Abs(t.m.vmm.firecracker)
	if err != nil {
		return err
	}
	fm, err := firecracker.Launch(ctx, firecracker.LaunchSpec{Binary: bin, APISock: api},
		firecracker.Options{Launcher: viewLauncher{t}, StartTimeout: t.r.bootTimeout(), Log: t.r.Log})
	if err != nil {
		return &FirecrackerError{Step: "launching", Err: err}
	}
	t.fc.machine = fm
	v := fcVM{binary: bin, kernel: t.m.kernel.Vmlinux, initramfs: t.m.initramfs, memMB: t.memMB(), cpus: 1}
	cfg := v.config(dir)
	cfg.Vsock.UDSPath = vsock
	cfg.Drives = []firecracker.Drive{
		{DriveID: wire.VMImageSerial, PathOnHost: t.erofs, IsReadOnly: true},
		{DriveID: wire.VMUpperSerial, PathOnHost: t.upperDrive.Name()},
	}
	if err := fm.Boot(ctx, cfg); err != nil {
		return &FirecrackerError{Step: "configuring and starting", Err: err}
	}
	streams, err := fm.Transport().Open(ctx)
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
	if err := l.t.ExecView(&wire.GVisorExec{Path: argv[0], Argv: argv, Config: []byte("{}")}, "firecracker"); err != nil {
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
