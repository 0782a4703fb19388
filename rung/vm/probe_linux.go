package vm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/internal/bootstamp"
	"github.com/dryexec/dryexec/internal/tail"
	"github.com/dryexec/dryexec/wire"
)

// socketPairs returns n connected stream socket pairs: the host's ends
// (non-blocking, for the runtime's poller) and the VMM's.
func socketPairs(n int) (host, vmm []*os.File, err error) {
	for i := range n {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			closeAll(host)
			closeAll(vmm)
			return nil, nil, fmt.Errorf("socketpair: %w", err)
		}
		unix.SetNonblock(fds[0], true)
		host = append(host, os.NewFile(uintptr(fds[0]), fmt.Sprintf("vm-port-%d", i)))
		vmm = append(vmm, os.NewFile(uintptr(fds[1]), fmt.Sprintf("vm-port-%d-vmm", i)))
	}
	return host, vmm, nil
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

// BootResult is what a probe VM measured.
type BootResult struct {
	// VMM is VMMQEMU or VMMFirecracker.
	VMM   string
	Accel string
	// Hello is the time from QEMU's start to the VM's init's first wire
	// message (its hello).
	Hello time.Duration
}

// errNoHello: the probe VM did not greet within its deadline.
var errNoHello = errors.New("no hello from the VM's init")

// bootProbe boots a VM with accel and no root and waits up to deadline for
// its init's hello, then ends it. It proves the whole path a trial takes up
// to the wire: QEMU, the accelerator, the kernel, the initramfs, the
// modules and the ports.
func bootProbe(ctx context.Context, cfg vmConfig, deadline time.Duration) (BootResult, error) {
	host, vmm, err := socketPairs(len(wire.VMPorts()))
	if err != nil {
		return BootResult{}, err
	}
	defer closeAll(host)
	cfg.portFDs = nil
	for i := range vmm {
		cfg.portFDs = append(cfg.portFDs, 3+i)
	}
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	argv := cfg.argv()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.ExtraFiles = vmm
	out := tail.New(consoleTail)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		closeAll(vmm)
		return BootResult{}, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	closeAll(vmm)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	hello := make(chan error, 1)
	go func() { hello <- readHello(host[0]) }()
	var res BootResult
	select {
	case err = <-hello:
		res = BootResult{VMM: VMMQEMU, Accel: cfg.accel, Hello: time.Since(start)}
		cmd.Process.Kill()
		<-done
	case err = <-done:
		err = fmt.Errorf("QEMU ended before the VM greeted (%v)", err)
	case <-ctx.Done():
		err = fmt.Errorf("%w within %v", errNoHello, deadline)
		<-done
	}
	if err != nil {
		if msg := tailString(out); msg != "" {
			err = fmt.Errorf("%w: %s", err, msg)
		}
		return BootResult{}, err
	}
	return res, nil
}

// readHello reads the VM's first wire message, which must be its init's
// hello (a vm-trial's, this wire version).
func readHello(rw io.ReadWriter) error {
	f, err := wire.NewConn(rw).Read()
	if err != nil {
		return err
	}
	var h wire.Hello
	if f.Kind != wire.KindHello || f.Decode(&h) != nil || h.Role != wire.RoleVMTrial || h.Version != wire.Version {
		return fmt.Errorf("unexpected first frame %s %q from the VM", f.Kind, f.Verb)
	}
	return nil
}

// probeDir keeps the probe's stamps: /run, which a reboot empties.
const probeDir = "/run/dryexec/vm-probe"

// probeStamp is the file that remembers, until the next boot of the host,
// which accelerator a probe VM booted with for this QEMU binary, kernel and
// initramfs; "" when there is nowhere to keep one.
func probeStamp(qemu, kernelDigest, initramfs string) string {
	return bootstamp.Path(probeDir, qemu, kernelDigest, filepath.Base(initramfs))
}

// consoleTail is how much of QEMU's and the console's output is kept for
// errors: enough for a kernel panic's trace.
const consoleTail = 16 << 10

func tailString(b *tail.Buffer) string {
	out, _ := b.Bytes()
	return strings.TrimSpace(string(bytes.ToValidUTF8(out, []byte("?"))))
}
