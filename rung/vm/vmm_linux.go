package vm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dryexec/dryexec/internal/bootstamp"
	"github.com/dryexec/dryexec/internal/tail"
	"github.com/dryexec/dryexec/rung/vm/firecracker"
	"github.com/dryexec/dryexec/wire"
)

// VMMEnv chooses the rung's VMM: "qemu", "firecracker" or "auto" (the
// default; Firecracker where firecracker.Detect says it is usable, else
// QEMU). Rung.VMM, when set, wins.
const VMMEnv = "DRYEXEC_VM_VMM"

// VMMs.
const (
	VMMQEMU        = "qemu"
	VMMFirecracker = "firecracker"
	VMMAuto        = "auto"
)

// ErrBadVMM: Rung.VMM or $DRYEXEC_VM_VMM names no VMM.
var ErrBadVMM = errors.New("unknown VMM")

// vmmMode parses a VMM setting; "" is auto.
func vmmMode(s string) (string, error) {
	switch s {
	case "", VMMAuto:
		return VMMAuto, nil
	case VMMQEMU, VMMFirecracker:
		return s, nil
	}
	return "", fmt.Errorf("%w %q (%s: qemu, firecracker or auto)", ErrBadVMM, s, VMMEnv)
}

// vmmChoice is which VMM the rung's VMs run on, and why.
type vmmChoice struct {
	// name is VMMQEMU or VMMFirecracker.
	name string
	// forced: the setting named it (no fallback).
	forced bool
	// firecracker is the binary found, if any.
	firecracker string
	// why says how it was decided, or why Firecracker is not used.
	why string
}

// doctorNote is doctor's line on the choice.
func (c vmmChoice) doctorNote() string {
	return "vmm: " + c.name + " (" + c.why + ")"
}

// deltaNote is the delta's words on the choice, after the boot's note.
func (c vmmChoice) deltaNote() string {
	return "; vmm " + c.name + ": " + c.why
}

// chooseVMM decides m's VMM: r.VMM, else $DRYEXEC_VM_VMM, else auto. Auto
// takes Firecracker only when firecracker.Detect says so: a binary, and a
// Firecracker probe VM that booted (with KVM, Firecracker's only
// accelerator) to the init's hello over vsock within KVMProbeDeadline —
// the rule QEMU's KVM is chosen by, never /dev/kvm merely opening. The
// probe's answer is remembered until the host's next boot, as QEMU's is;
// probe false uses only a remembered answer. Firecracker named outright
// and unusable is the rung unavailable, not a fallback.
func (r *Rung) chooseVMM(ctx context.Context, m *machine, probe bool) error {
	mode, err := vmmMode(cmp.Or(r.VMM, os.Getenv(VMMEnv)))
	if err != nil {
		return err
	}
	if mode == VMMQEMU {
		m.vmm = vmmChoice{name: VMMQEMU, forced: true, why: "chosen by " + VMMEnv + " or Rung.VMM"}
		return nil
	}
	d := firecracker.Detect(ctx, r.Firecracker, nil)
	if d.Binary != "" {
		d = r.detectFirecracker(ctx, m, d.Binary, probe)
	}
	if !d.Use {
		if mode == VMMFirecracker {
			return unavailable("firecracker: " + d.Why)
		}
		m.vmm = vmmChoice{name: VMMQEMU, firecracker: d.Binary, why: "firecracker not used: " + d.Why}
		return nil
	}
	m.vmm = vmmChoice{name: VMMFirecracker, forced: mode == VMMFirecracker, firecracker: d.Binary, why: d.Why}
	return nil
}

// detectFirecracker is firecracker.Detect with the Firecracker probe VM,
// or a remembered answer.
func (r *Rung) detectFirecracker(ctx context.Context, m *machine, binary string, probe bool) firecracker.Detection {
	stamp := bootstamp.Path(probeDir, binary, "firecracker", m.kernel.Digest, filepath.Base(m.initramfs))
	if stamp != "" {
		if b, err := os.ReadFile(stamp); err == nil {
			use, why, _ := strings.Cut(string(b), "\n")
			if use == "use" || use == "no" {
				return firecracker.Detection{Binary: binary, Use: use == "use", Why: why}
			}
		}
	}
	if !probe {
		return firecracker.Detection{Binary: binary, Why: "firecracker at " + binary + " not probed yet"}
	}
	vm := r.fcProbeVM(m, binary)
	d := firecracker.Detect(ctx, binary, func(ctx context.Context) error {
		_, err := fcBootProbe(ctx, vm, KVMProbeDeadline)
		return err
	})
	if stamp != "" && ctx.Err() == nil {
		use := "no"
		if d.Use {
			use = "use"
		}
		// Best effort: without the stamp the next call probes again.
		os.WriteFile(stamp, []byte(use+"\n"+d.Why), 0o600)
	}
	return d
}

// fcVM is one Firecracker VM as the rung configures it.
type fcVM struct {
	binary, kernel, initramfs string
	memMB                     int64
	cpus                      int
	// runDir holds the VM's sockets (a fresh dir beneath it, removed
	// with the VM); "": the system's temp dir.
	runDir string
	// session has the init start a session guest instead of a trial's.
	session bool
}

// fcProbeVM is the probe VM: m's kernel and initramfs, no root, QEMU's
// probe's size.
func (r *Rung) fcProbeVM(m *machine, binary string) fcVM {
	return fcVM{binary: binary, kernel: m.kernel.Vmlinux, initramfs: m.initramfs, memMB: r.MemoryMB}
}

// fcGuestCID is the VM's vsock CID: each VM has a device of its own, so
// every VM can have the first CID a guest may (3).
const fcGuestCID = 3

// fcWireParam tells the VM's init to find the wire's streams on vsock
// ports from firecracker.VsockPortBase (the kernel leaves a dotted
// parameter to modules, so init's argv is unchanged).
const fcWireParam = wire.VMVsockParam

// fcKernelArgs is kernelArgs for Firecracker: reboot=k, as Firecracker
// ends its process on the guest's keyboard-controller reset (QEMU's
// microvm has no such controller, hence its reboot=t), and pci=off, as
// Firecracker's devices are virtio-mmio only.
func fcKernelArgs() string {
	return strings.Replace(kernelArgs, "reboot=t", "reboot=k pci=off "+fcWireParam, 1)
}

// config is the VM's API configuration, its vsock socket in dir.
func (v fcVM) config(dir string) firecracker.Config {
	mem := v.memMB
	if mem <= 0 {
		mem = 512
	}
	args := fcKernelArgs()
	if v.session {
		// As on QEMU (vmConfig.argv): the init's argv ends with the role.
		args += " " + wire.RoleSession
	}
	return firecracker.Config{
		Machine: firecracker.MachineConfig{VCPUCount: max(v.cpus, 1), MemSizeMiB: mem},
		Boot:    firecracker.BootSource{KernelImagePath: v.kernel, InitrdPath: v.initramfs, BootArgs: args},
		Vsock:   &firecracker.Vsock{GuestCID: fcGuestCID, UDSPath: filepath.Join(dir, "vsock")},
	}
}

// FirecrackerError is a Firecracker VM that failed at Step; Err is the
// driver's (errors.As finds *firecracker.APIError, *firecracker.ConnectError,
// firecracker.ErrExited, … through it).
type FirecrackerError struct {
	// Step is "launching", "configuring and starting", "connecting the
	// wire over vsock" or "the init's hello".
	Step string
	Err  error
}

func (e *FirecrackerError) Error() string {
	return "firecracker VM: " + e.Step + ": " + e.Err.Error()
}

func (e *FirecrackerError) Unwrap() error { return e.Err }

// fcBootProbe boots v with Firecracker and waits up to deadline for its
// init's hello over vsock, then ends it: bootProbe's counterpart, which
// proves the path a Firecracker VM takes to the wire (the binary, KVM, the
// API calls, the kernel, the initramfs, the vsock). Whatever happens, the
// process is ended and its sockets and dir removed.
func fcBootProbe(ctx context.Context, v fcVM, deadline time.Duration) (BootResult, error) {
	dir, err := os.MkdirTemp(v.runDir, "dxfc-")
	if err != nil {
		return BootResult{}, err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeoutCause(ctx, deadline, fmt.Errorf("%w within %v", errNoHello, deadline))
	defer cancel()
	out := tail.New(consoleTail)
	fail := func(step string, err error) (BootResult, error) {
		if msg := tailString(out); msg != "" {
			err = fmt.Errorf("%w: %s", err, msg)
		}
		return BootResult{}, &FirecrackerError{Step: step, Err: err}
	}
	start := time.Now()
	fm, err := firecracker.Launch(ctx, firecracker.LaunchSpec{Binary: v.binary, APISock: filepath.Join(dir, "api"), Output: out}, firecracker.Options{})
	if err != nil {
		return fail("launching", err)
	}
	defer fm.Close()
	if err := fm.Boot(ctx, v.config(dir)); err != nil {
		return fail("configuring and starting", err)
	}
	streams, err := fm.Transport().Open(ctx)
	if err != nil {
		return fail("connecting the wire over vsock", err)
	}
	defer func() {
		for _, s := range streams {
			s.Close()
		}
	}()
	// ctx's end breaks the read of a guest that connected but is silent.
	stop := context.AfterFunc(ctx, func() { streams[0].Close() })
	defer stop()
	if err := readHello(streams[0]); err != nil {
		if ctx.Err() != nil {
			err = errors.Join(err, context.Cause(ctx))
		}
		return fail("the init's hello", err)
	}
	return BootResult{VMM: VMMFirecracker, Accel: AccelKVM, Hello: time.Since(start)}, nil
}
