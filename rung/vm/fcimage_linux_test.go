package vm

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/bootstamp"
	"github.com/dryexec/dryexec/rung/vm/firecracker"
	"github.com/dryexec/dryexec/rung/vm/firecracker/fctest"
	"github.com/dryexec/dryexec/wire"
)

// fakeQEMUFirecracker is fakeFirecrackerEnv's value that makes the test
// binary fctest's fake backed by QEMU (qemuBackedFirecracker).
const fakeQEMUFirecracker = "qemu"

// qemuBackedFirecracker is the fake firecracker's Backend here (no KVM,
// no Firecracker, no vhost-vsock on this host): at InstanceStart it boots
// what the API configured — kernel, initrd, boot args, vCPUs, memory,
// drives (their ids as serials, as Firecracker's virtio-blk gives them) —
// in QEMU's microvm under TCG, with the rung's own QEMU command line
// (vmConfig.argv), and stands virtio-serial in for the vsock: each
// "CONNECT <port>" on the vsock socket is bridged to the port's chardev.
// It rewrites the boot args' wire.VMVsockParam away (the guest then opens
// its virtio-serial ports) and reboot=k to QEMU's reboot=t; a start whose
// boot args lack wire.VMVsockParam is refused, as that guest would never
// listen on the vsock. QEMU's end is the fake's (Started.Reset), as a
// guest's reset ends Firecracker. Firecracker's snapshots are QEMU's
// migration, as the rung's own parks: PATCH /vm is QMP's stop and cont,
// snapshot/create migrates the stopped VM to the memory file, and
// snapshot/load starts QEMU with the same command line and that file as
// its incoming migration, then lets it run if asked to.
func qemuBackedFirecracker(st fctest.Started) (*fctest.BackendVM, error) {
	args := " " + st.BootArgs + " "
	if !strings.Contains(args, " "+wire.VMVsockParam+" ") || !strings.Contains(args, " reboot=k ") {
		return nil, fmt.Errorf("fctest: boot args %q lack %s or reboot=k", st.BootArgs, wire.VMVsockParam)
	}
	args = strings.Replace(strings.Replace(args, " "+wire.VMVsockParam+" ", " ", 1), " reboot=k ", " reboot=t ", 1)
	q, err := FindQEMU("")
	if err != nil {
		return nil, err
	}
	host, vmm, err := socketPairs(len(wire.VMPorts()))
	if err != nil {
		return nil, err
	}
	defer closeAll(vmm)
	monHost, monVMM, err := socketPairs(1)
	if err != nil {
		closeAll(host)
		return nil, err
	}
	defer closeAll(monVMM)
	mon := []*os.File{monHost[0], monVMM[0]}
	cfg := vmConfig{qemu: q, accel: AccelTCG, kernel: st.Kernel, initramfs: st.Initrd, memMB: st.MemMiB, cpus: st.VCPUs, transport: virtioSerial{}}
	files := slices.Clone(vmm)
	for i := range vmm {
		cfg.portFDs = append(cfg.portFDs, 3+i)
	}
	cfg.qmpFD = 3 + len(files)
	files = append(files, mon[1])
	if st.Restore != "" {
		f, err := os.Open(st.Restore)
		if err != nil {
			closeAll(append(host, mon[0]))
			return nil, err
		}
		defer f.Close()
		cfg.incomingFD = 3 + len(files)
		files = append(files, f)
	}
	for _, d := range st.Drives {
		cfg.drives = append(cfg.drives, drive{path: d.Path, serial: d.ID, readOnly: d.ReadOnly})
	}
	argv := cfg.argv()
	argv[slices.Index(argv, "-append")+1] = strings.TrimSpace(args)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.ExtraFiles = files
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		closeAll(append(host, mon[0]))
		return nil, err
	}
	// What the guest wrote last (its trial.exit, trial.done) is still in
	// the bridges when QEMU ends: the fake ends (its process exits) once
	// every bridge has passed on the guest's end. The host connects every
	// port at the boot, long before QEMU can end.
	var toHost sync.WaitGroup
	go func() {
		cmd.Wait()
		toHost.Wait()
		st.Reset()
	}()
	fail := func(err error) (*fctest.BackendVM, error) {
		cmd.Process.Kill()
		closeAll(host)
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	mq, err := dialQMP(ctx, mon[0])
	if err != nil {
		return fail(err)
	}
	if st.Restore != "" {
		if err := mq.waitIncoming(ctx, st.Resume); err != nil {
			return fail(err)
		}
	}
	call := func(cmd string) func() error {
		return func() error {
			_, err := mq.exec(context.Background(), cmd, nil, nil)
			return err
		}
	}
	vm := &fctest.BackendVM{Guest: map[uint32]func(net.Conn){}, Pause: call("stop"), Resume: call("cont"),
		Save: func(mem string) error {
			f, err := os.OpenFile(mem, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := mq.saveTo(context.Background(), f); err != nil {
				return err
			}
			return f.Sync()
		}}
	for i, f := range host {
		vm.Guest[firecracker.VsockPortBase+uint32(i)] = func(c net.Conn) {
			toHost.Add(1)
			go func() {
				io.Copy(f, c)
				shutWrite(f)
			}()
			io.Copy(c, f)
			c.(*net.UnixConn).CloseWrite()
			toHost.Done()
		}
	}
	return vm, nil
}

// QEMUFirecracker is a `firecracker` for the rung: a script that runs this
// test binary as the QEMU-backed fake, logging its calls (the view guest
// execs firecracker with PATH alone in its environment, so the script
// carries the rest). The rung is told Firecracker was probed and usable
// (the probe's stamp): its probe's 5 s for KVM are no time for TCG.
// It returns the calls the fake answered so far, each as "METHOD PATH"
// with its body, status and whether it broke the API.
func QEMUFirecracker(t *testing.T, r *Rung) func(*testing.T) []fctest.Call {
	t.Helper()
	h := fakeFirecracker(t, fake{})
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(h.bin)
	script := fmt.Sprintf("#!/bin/sh\nexec env %s=%s %s=%s %q \"$@\"\n", fakeFirecrackerEnv, fakeQEMUFirecracker, fctest.LogEnv, h.log, self)
	if err := os.WriteFile(h.bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(fakeFirecrackerEnv, "")
	m, err := r.resolveQEMU(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	stamp := bootstamp.Path(probeDir, h.bin, "firecracker", m.kernel.Digest, filepath.Base(m.initramfs))
	if err := os.WriteFile(stamp, []byte("use\nfirecracker at "+h.bin+" (the test's QEMU-backed fake)"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(stamp) })
	r.Firecracker = h.bin
	return h.calls
}

// Routes is routes for the external tests.
func Routes(calls []fctest.Call) []string { return routes(calls) }

// NoFCLeftovers fails t if a trial left anything in DRYEXEC_HOME's
// private temp dir (an upper drive's dir, which holds the VMM's sockets)
// or a child process of the test's.
func NoFCLeftovers(t *testing.T) {
	t.Helper()
	home, err := dryexec.DefaultHome(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	noLeftovers(t, filepath.Join(home, "tmp"))
}
