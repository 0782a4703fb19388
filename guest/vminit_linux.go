package guest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/internal/guestexe"
	"github.com/dryexec/dryexec/wire"
)

// runVMInit is the vm rung's init (wire.RoleVMInit), PID 1 of a microVM whose
// initramfs holds this binary as /init and the virtio modules the kernel
// lacks. It loads them, configures the NIC netsim serves (vmNetUp), opens the wire ports (virtio-serial) and starts the
// trial guest (wire.RoleVMTrial) on them, as PID 1 of a pid and mount namespace
// of its own, which is what the gvisor trial guest is in gVisor: the ports
// land at the wire's descriptors in the child, where no runtime of ours has
// put anything yet. The VM ends with the trial guest: whatever happens,
// init resets the machine (QEMU's -no-reboot makes that QEMU's exit), so a
// failed init never leaves a VM waiting. args may name the child's role
// instead: wire.RoleSession, a session's guest (vmsession_linux.go).
func runVMInit(args []string) int {
	defer func() {
		unix.Sync()
		unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
	}()
	logf := func(format string, a ...any) { fmt.Fprintf(os.Stderr, "dryexec vm-init: "+format+"\n", a...) }
	if err := vmEarlyMounts(); err != nil {
		logf("%v", err)
		return 1
	}
	// The host chose the wire's transport on the kernel's command line:
	// read once, for the modules to load and the streams to open.
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		logf("reading the kernel's command line: %v", err)
		return 1
	}
	vsock := vmWireOnVsock(string(cmdline))
	if err := loadVMModules(vsock); err != nil {
		logf("%v", err)
		return 1
	}
	if err := vmNetUp(10 * time.Second); err != nil {
		logf("the network: %v", err)
		return 1
	}
	ports, err := openVMWire(vsock, 10*time.Second)
	if err != nil {
		logf("%v", err)
		return 1
	}
	// Closed before the reset (deferred after it): the last close of a
	// vsock stream waits for the host to have it (openVsockPorts).
	defer func() {
		for _, p := range ports {
			p.Close()
		}
	}()
	role := wire.RoleVMTrial
	if len(args) > 0 && args[0] == wire.RoleSession {
		role = wire.RoleSession
	}
	cmd := exec.Command(guestexe.Self(), "guest", role)
	cmd.Args[0] = "dryexec"
	cmd.Env = []string{}
	cmd.ExtraFiles = ports
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS}
	if err := cmd.Run(); err != nil {
		logf("the %s guest: %v", role, err)
		return 1
	}
	return 0
}

// setWallClock sets the VM's clock to the host's wall clock as the host sent
// it (ns since the epoch; 0: leave it).
func setWallClock(wallNS int64) error {
	if wallNS <= 0 {
		return nil
	}
	ts := unix.NsecToTimespec(wallNS)
	if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil {
		return fmt.Errorf("setting the VM's clock: %w", err)
	}
	return nil
}

// runVMTrial is the vm rung's trial guest (wire.RoleVMTrial), PID 1 of its pid
// namespace in the VM, with the wire ports at the wire's descriptors: it
// greets the host, mounts the view as its root and runs the command as the
// gvisor trial guest does.
func runVMTrial() int {
	conn := wire.NewConn(os.NewFile(wire.CtrlFD, "ctrl"))
	cfg, code, ok := greet(conn, wire.RoleVMTrial)
	if !ok {
		return code
	}
	defer vmHeartbeat(func() error { return conn.Send(wire.KindEvent, wire.VerbVMAlive, 0, nil) })()
	// The VM's clock started from the RTC's whole second; the files the
	// command writes get the host's time from QEMU's 9p server: make (and
	// anything comparing the two) would see its own writes in the future.
	if err := setWallClock(cfg.WallNS); err != nil {
		return sendFailure(conn, "setup", err)
	}
	img, err := enterVMRoot(&cfg, cfg.UpperSize)
	if err != nil {
		return sendFailure(conn, "setup", err)
	}
	if err := loopbackUp(); err != nil {
		return sendFailure(conn, "net", err)
	}
	if img != nil {
		// The root is the VM's own overlay: FIFOs and times are its
		// kernel's; the upper dir goes back to the host once the command's
		// processes are gone, before trial.done. A failed export leaves the
		// drive without its magic, which the host reports.
		export := func() ([]wire.SandboxNode, []string) {
			if err := img.export(); err != nil {
				fmt.Fprintf(os.Stderr, "%s%v\n", wire.VMExportFailed, err)
			}
			return nil, nil
		}
		return runInnerTrial(conn, &cfg, innerProfile(), export, nil, newVMOOM(), img.full)
	}
	// innerProfile, with a FIFO's mknod and chmod, which QEMU's 9p server
	// cannot do, done by the host (vmFIFOs). A socket node (bind(2),
	// mknod) fails on the view with ENXIO for the same reason: not handled
	// yet.
	fifos, err := newVMFIFOs(conn)
	if err != nil {
		return sendFailure(conn, "setup", err)
	}
	return runInnerTrial(conn, &cfg, vmProfile(), nil, fifos, newVMOOM(), nil)
}

// vmEarlyMounts gives the initramfs what loading modules and finding the
// ports need: /proc, /sys and devtmpfs's /dev.
func vmEarlyMounts() error {
	for _, m := range []struct{ src, dst, fs string }{{"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}, {"devtmpfs", "/dev", "devtmpfs"}} {
		if err := os.MkdirAll(m.dst, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.src, m.dst, m.fs, unix.MS_NOSUID, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mounting %s: %w", m.dst, err)
		}
	}
	return nil
}

// loadVMModules loads the modules wire.VMModules lists, in its order (the
// host wrote them dependencies first). One the kernel has built in or
// already loaded is no error. The vsock ones are loaded only when the wire
// runs over vsock (a VM on Firecracker): elsewhere the VM has no vsock
// device, and a vsock stack would only give commands a /dev/vsock to open.
func loadVMModules(vsock bool) error {
	list, err := os.ReadFile(wire.VMModules)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for name := range strings.FieldsSeq(string(list)) {
		if !vsock && strings.Contains(name, "vsock") {
			continue
		}
		f, err := os.Open("/lib/modules/" + name + ".ko")
		if err != nil {
			return err
		}
		err = unix.FinitModule(int(f.Fd()), "", 0)
		f.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("loading module %s: %w", name, err)
		}
	}
	return nil
}

// openVMPorts opens each wire port (wire.VMPorts), in the order of the
// wire's descriptors. The ports appear when virtio_console has probed the device, which may be
// after its module's load returned: they are looked for until deadline.
func openVMPorts(wait time.Duration) ([]*os.File, error) {
	deadline := time.Now().Add(wait)
	names := wire.VMPorts()
	for {
		found := map[string]string{}
		ents, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, e := range ents {
			b, err := os.ReadFile(e)
			if err != nil {
				continue
			}
			found[strings.TrimSpace(string(b))] = "/dev/" + filepath.Base(filepath.Dir(e))
		}
		missing := ""
		for _, n := range names {
			if _, ok := found[wire.VMPortPrefix+n]; !ok {
				missing = n
				break
			}
		}
		if missing == "" {
			files := make([]*os.File, len(names))
			for i, n := range names {
				fd, err := unix.Open(found[wire.VMPortPrefix+n], unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
				if err != nil {
					return nil, fmt.Errorf("opening the %s port: %w", n, err)
				}
				files[i] = os.NewFile(uintptr(fd), n)
			}
			return files, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no virtio-serial port %s%s after %v", wire.VMPortPrefix, missing, wait)
		}
		// Polled: the driver's probe posts no event an init without
		// udev could wait for.
		time.Sleep(5 * time.Millisecond)
	}
}

// enterVMRoot mounts the view the host exports (9p, wire.VMRootTag) and
// makes it the root, as switch_root does (an initramfs cannot be
// pivot_root'ed away), with the VM's own /proc (of this pid namespace),
// /sys, /dev, /dev/pts and /dev/shm over it: those are the VM's, never
// written to the view.
//
// With the host's image drive (wire.VMImageSerial), the root is instead an
// overlay of the VM's own over the image (mountVMImage), netsim's files
// (net's) bound over it, and the returned vmImage exports its upper dir.
func enterVMRoot(net *wire.TrialStart, upperSize int64) (*vmImage, error) {
	const newRoot = "/newroot"
	if err := os.MkdirAll(newRoot, 0o755); err != nil {
		return nil, err
	}
	img, err := mountVMImage(newRoot, net, upperSize)
	if err != nil {
		return nil, err
	}
	if img == nil {
		// cache=mmap: the view's files may be mapped shared and written
		// (the sync before trial.exit flushes them); nothing else is
		// cached, so the host's walk sees every write.
		if err := unix.Mount(wire.VMRootTag, newRoot, "9p", 0, "trans=virtio,version=9p2000.L,access=client,cache=mmap,msize=524288"); err != nil {
			return nil, fmt.Errorf("mounting the view (9p %s): %w", wire.VMRootTag, err)
		}
	}
	if err := enterNewRoot(newRoot); err != nil {
		return nil, err
	}
	return img, nil
}

// enterNewRoot makes newRoot the root (enterVMRoot).
func enterNewRoot(newRoot string) error {
	if err := unix.Chdir(newRoot); err != nil {
		return err
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("moving the view to /: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return err
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	for _, m := range []struct{ src, dst, fs, opts string }{
		{"proc", "/proc", "proc", ""},
		{"sysfs", "/sys", "sysfs", ""},
		{"devtmpfs", "/dev", "devtmpfs", ""},
		{"devpts", "/dev/pts", "devpts", "newinstance,ptmxmode=0666"},
		{"shm", "/dev/shm", "tmpfs", "mode=1777"},
	} {
		if m.dst == "/dev/pts" || m.dst == "/dev/shm" {
			// In the VM's devtmpfs, not in the view.
			if err := os.MkdirAll(m.dst, 0o755); err != nil {
				return err
			}
		}
		flags := uintptr(unix.MS_NOSUID)
		if m.dst != "/dev" {
			flags |= unix.MS_NODEV
		}
		if m.dst == "/sys" {
			// Read-only for the command, as on gvisor.
			flags |= unix.MS_RDONLY | unix.MS_NOEXEC
		}
		if err := unix.Mount(m.src, m.dst, m.fs, flags, m.opts); err != nil {
			return fmt.Errorf("mounting %s: %w", m.dst, err)
		}
	}
	// The VM's kernel is the sandbox's own, but the guest supervisor runs
	// on it too: the command (uid 0 here) must not reconfigure it
	// (core_pattern, sysrq, IRQs) or read its memory (kcore) any more than
	// on ns, where the same entries are the host's.
	if err := lockProc("", "/dev/null"); err != nil {
		return err
	}
	return nil
}
