package vm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/cgroup"
	"github.com/dryexec/dryexec/internal/guestexe"
	"github.com/dryexec/dryexec/internal/tail"
	"github.com/dryexec/dryexec/rung/internal/viewtrial"
	"github.com/dryexec/dryexec/wire"
)

// Name is the rung's contract name.
const Name = "vm"

// Rung runs trials in microVMs. The zero value is ready to use; it runs as
// root only (Available says so otherwise).
type Rung struct {
	// QEMU is the qemu-system-x86_64 binary; empty: FindQEMU's choice.
	QEMU string
	// Kernel is the kernel to boot; empty: FindKernel's choice.
	Kernel string
	// CacheDir keeps extracted kernels and initramfs images; empty:
	// $DRYEXEC_HOME/vm.
	CacheDir string
	// Accel forces an accelerator (AccelKVM, AccelTCG); empty: the probe's
	// (KVM if a probe VM boots with it within KVMProbeDeadline, else TCG).
	Accel string
	// VMM is VMMQEMU, VMMFirecracker or VMMAuto; empty: $DRYEXEC_VM_VMM,
	// else auto (chooseVMM, vmm_linux.go).
	VMM string
	// Firecracker is the firecracker binary; empty: firecracker.Detect's.
	Firecracker string
	// MemoryMB is the VM's RAM when the trial's limits set none; 0: 512.
	MemoryMB int64
	// GuestExe is the guest binary: the view guest on the host and the
	// VM's /init. It must be static (the initramfs has no libc); empty:
	// guestexe.Executable().
	GuestExe string
	// Log receives debug records; nil logs nothing.
	Log *slog.Logger
	// Cgroups says where VMs' cgroups are made (see package cgroup).
	Cgroups cgroup.Options
	// BootTimeout bounds the boot to the init's hello; 0: 60s (TCG on a
	// busy host).
	BootTimeout time.Duration
	// WalkGrace bounds how long the VM may take to report and end after
	// the command's own timeout; 0 means 60s.
	WalkGrace time.Duration
	// SilenceLimit is how long a VM running a command may send nothing
	// (its guest's heartbeat, wire.VerbVMAlive, comes every
	// wire.VMAliveEvery) before it is taken as hung and the trial ends
	// with its delta marked incomplete: the bound on a trial without a
	// timeout whose VM stopped answering. 0: 2 minutes, room for a guest
	// starved on a loaded host under TCG.
	SilenceLimit time.Duration
	// CollectMin and CollectTimeout are linuxns.Rung's: how long a trial
	// gets, after its command, to hash and store what it wrote.
	CollectMin, CollectTimeout time.Duration
	// Trace, when set, is called as a trial passes each phase ("view": the
	// overlays are built, "hello": the VM's guest greeted, "exit": the
	// command has ended, "gone": QEMU has ended, "done": the delta is
	// built).
	Trace func(phase string)

	// imageOver9p has a trial on an image export the host's view of it
	// over 9p, as before the erofs drive: the benchmark's baseline.
	imageOver9p bool
}

var _ dryexec.Rung = (*Rung)(nil)

// KVMProbeDeadline bounds the probe VM's boot with KVM: on a host where
// /dev/kvm opens but KVM does not work (a nested hypervisor that hangs
// QEMU), the probe gives up after it and TCG is used.
const KVMProbeDeadline = 5 * time.Second

// Name implements dryexec.Rung.
func (r *Rung) Name() string { return Name }

func (r *Rung) trace(phase string) {
	if r.Trace != nil {
		r.Trace(phase)
	}
}

func (r *Rung) walkGrace() time.Duration { return cmp.Or(r.WalkGrace, 60*time.Second) }

func (r *Rung) bootTimeout() time.Duration { return cmp.Or(r.BootTimeout, 60*time.Second) }

func (r *Rung) silenceLimit() time.Duration { return cmp.Or(r.SilenceLimit, 2*time.Minute) }

func unavailable(missing string) error {
	return &dryexec.IsolationUnavailableError{Rung: Name, Missing: missing}
}

func (r *Rung) guestExe() (string, error) {
	exe := cmp.Or(r.GuestExe, guestexe.Executable())
	if strings.HasPrefix(exe, "/proc/") {
		self, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("finding the guest binary: %w", err)
		}
		exe = self
	}
	return exe, nil
}

// machine is what every VM of this rung boots, resolved once per call.
type machine struct {
	qemu      string
	kernel    *Kernel
	initramfs string
	accel     string
	// why is what the probe found of the accelerators not chosen ("" when
	// unprobed or forced).
	why string
	// vmm is the VMM and why (vmm_linux.go).
	vmm vmmChoice
}

// resolve is resolveQEMU's machine with its VMM chosen (chooseVMM).
func (r *Rung) resolve(ctx context.Context, probe bool) (*machine, error) {
	m, err := r.resolveQEMU(ctx, probe)
	if err != nil {
		return nil, err
	}
	if err := r.chooseVMM(ctx, m, probe); err != nil {
		return nil, err
	}
	return m, nil
}

// resolveQEMU finds QEMU, the kernel and the initramfs, and decides the
// accelerator: r.Accel, else the one the last successful probe on this
// boot of the host stamped, else a probe's (probe false: TCG, unprobed).
func (r *Rung) resolveQEMU(ctx context.Context, probe bool) (*machine, error) {
	if os.Geteuid() != 0 {
		return nil, unavailable("root: the vm rung's view guest builds overlays as root (rootless is not supported yet)")
	}
	q, err := FindQEMU(r.QEMU)
	if err != nil {
		return nil, unavailable(err.Error())
	}
	k, err := FindKernel(ctx, r.Kernel, r.CacheDir)
	if err != nil {
		return nil, unavailable(err.Error())
	}
	exe, err := r.guestExe()
	if err != nil {
		return nil, err
	}
	initrd, err := Initramfs(k, exe, r.CacheDir)
	if err != nil {
		return nil, unavailable("the initramfs: " + err.Error())
	}
	m := &machine{qemu: q, kernel: k, initramfs: initrd, accel: r.Accel}
	if m.accel != "" {
		return m, nil
	}
	stamp := probeStamp(q, k.Digest, initrd)
	if stamp != "" {
		if b, err := os.ReadFile(stamp); err == nil {
			accel, why, _ := strings.Cut(string(b), "\n")
			if accel == AccelKVM || accel == AccelTCG {
				m.accel, m.why = accel, why
				return m, nil
			}
		}
	}
	if !probe {
		m.accel = AccelTCG
		return m, nil
	}
	accel, why, err := r.probe(ctx, m)
	if err != nil {
		return nil, unavailable(err.Error())
	}
	m.accel, m.why = accel, why
	if stamp != "" {
		// Best effort: without the stamp the next call probes again.
		os.WriteFile(stamp, []byte(accel+"\n"+why), 0o600)
	}
	return m, nil
}

// probe boots a probe VM with KVM (deadline KVMProbeDeadline), then, if it
// did not greet, with TCG (deadline BootTimeout); it returns the first
// accelerator that booted, and why those before it did not. /dev/kvm is
// never merely opened: on a nested hypervisor it opens and QEMU+KVM then
// hangs.
func (r *Rung) probe(ctx context.Context, m *machine) (accel, why string, err error) {
	cfg := vmConfig{qemu: m.qemu, kernel: m.kernel.Vmlinux, initramfs: m.initramfs, transport: virtioSerial{}}
	var failed []string
	for _, a := range []struct {
		accel    string
		deadline time.Duration
	}{{AccelKVM, KVMProbeDeadline}, {AccelTCG, r.bootTimeout()}} {
		cfg.accel = a.accel
		res, err := bootProbe(ctx, cfg, a.deadline)
		if err == nil {
			if r.Log != nil {
				r.Log.Debug("vm probe booted", "accel", a.accel, "hello", res.Hello)
			}
			return a.accel, strings.Join(failed, "; "), nil
		}
		failed = append(failed, a.accel+": "+oneLine(err.Error()))
		if ctx.Err() != nil {
			break
		}
	}
	return "", "", fmt.Errorf("no probe VM booted (%s)", strings.Join(failed, "; "))
}

// oneLine is s's first line, at most 300 bytes of it.
func oneLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// Available boots a probe VM (see probe); a success is remembered until
// the host's next boot. Looking for QEMU and /dev/kvm would not do: both
// may be there and no VM boot.
func (r *Rung) Available(ctx context.Context) error {
	_, err := r.resolve(ctx, true)
	return err
}

// Boot boots a probe VM with r's accelerator (probed when unset) and
// returns how long it took to the init's hello: the benchmark's "boot to
// the first served wire message".
func (r *Rung) Boot(ctx context.Context) (BootResult, error) {
	m, err := r.resolve(ctx, true)
	if err != nil {
		return BootResult{}, err
	}
	if m.vmm.name == VMMFirecracker {
		return fcBootProbe(ctx, r.fcProbeVM(m, m.vmm.firecracker), r.bootTimeout())
	}
	cfg := vmConfig{qemu: m.qemu, accel: m.accel, kernel: m.kernel.Vmlinux, initramfs: m.initramfs, transport: virtioSerial{}}
	return bootProbe(ctx, cfg, r.bootTimeout())
}

// Notes are what `dryexec doctor` says of an available vm rung.
func (r *Rung) Notes() []string {
	m, err := r.resolve(context.Background(), false)
	if err != nil {
		return nil
	}
	accel := "qemu: " + m.qemu + " -M microvm, accel=" + m.accel + " (decided by booting a probe VM, KVM first)"
	if m.why != "" {
		accel += "; not chosen: " + m.why
	}
	return []string{
		m.vmm.doctorNote(),
		accel,
		"kernel: " + m.kernel.Vmlinux + " (sha256 " + m.kernel.Digest[:16] + "…); initramfs: " + m.initramfs,
		"wire: virtio-serial; root: the view over 9p (virtio-9p, passthrough), upper dirs on the host; on an OCI image: the image's erofs on a read-only virtio-blk drive under the VM's own overlay, its upper dir sent back on a second drive and unpacked by the host; with vmm firecracker, such a trial or session with --net none runs on Firecracker (the same drives, the wire over vsock, no NIC) and everything else on QEMU",
		"network: netsim, as on ns, behind the VM's virtio-net (QEMU's -netdev dgram on a socket netsim serves, Ethernet frames)",
		"limits: memory is the VM's RAM (its kernel's OOM kills recorded), one vCPU; QEMU in a cgroup of the trial's (memory: the limit plus QEMU's overhead; cpu.max; pids with room for QEMU's threads); pids as RLIMIT_NPROC inside the VM",
		"sessions: one VM per session, the session guest as its init's child over the same view; workspace on a tmpfs of the VM's own (scan staging, as on gvisor); the same network as a trial's; park and resume (QMP migration to a file; on Firecracker its snapshot/create and snapshot/load) and fork with memory (n restores of a snapshot; not on Firecracker)",
	}
}

// Trial implements dryexec.Rung.
func (r *Rung) Trial(ctx context.Context, spec dryexec.TrialSpec) (*dryexec.StateDelta, error) {
	spec = spec.WithDefaults()
	if err := checkAction(spec); err != nil {
		return nil, err
	}
	if spec.TrialID == "" {
		spec.TrialID = dryexec.NewTrialID()
	}
	t, err := r.newTrial(ctx, spec)
	if err != nil {
		return nil, err
	}
	defer t.net.close()
	defer t.cleanup()
	if err := t.openImage(ctx); err != nil {
		return nil, err
	}
	if err := t.start(); err != nil {
		return nil, err
	}
	d, err := t.run(ctx)
	imageDelta(spec, d)
	return d, err
}

// newTrial resolves what every VM of the rung needs for spec (QEMU, the
// kernel, the initramfs, the host's mount plan and the masks, netsim's CA
// key among them) into an unstarted trial: a trial's VM or a session's.
func (r *Rung) newTrial(ctx context.Context, spec dryexec.TrialSpec) (*trial, error) {
	m, err := r.resolve(ctx, true)
	if err != nil {
		return nil, err
	}
	exe, err := r.guestExe()
	if err != nil {
		return nil, err
	}
	sb, err := sandboxFor(spec)
	if err != nil {
		return nil, err
	}
	nw, err := startNet(spec.Net, sb.caDir, spec.TrialID)
	if err != nil {
		return nil, err
	}
	t := &trial{r: r, m: m, exe: exe, transport: virtioSerial{}, net: nw, sb: sb}
	t.Spec, t.Mounts, t.Cover, t.ScratchFD = spec, sb.mounts, sb.cover, -1
	t.Rung, t.What, t.TailName = Name, "the VM", "QEMU and console"
	t.Tail = func() string { return tailString(t.console) }
	t.Trace, t.Log, t.CollectMin, t.CollectTimeout = r.Trace, r.Log, r.CollectMin, r.CollectTimeout
	t.InnerStart = t.innerStart
	return t, nil
}

// trial is one VM: the view guest (which becomes QEMU), the host ends of
// the wire's ports, and what the host keeps of it (viewtrial.Trial).
type trial struct {
	viewtrial.Trial
	r         *Rung
	m         *machine
	exe       string
	transport transport

	ports   []*os.File   // host ends: ctrl, stdout, stderr, stdin, stub
	ctrl    *heardFile   // ports[0], noting when the VM last said something
	console *tail.Buffer // QEMU's and the VM console's output
	net     *vmNet

	bootStart time.Time
	boot      time.Duration
	// session: the VM's init starts a session guest, not a trial's.
	session bool
	// qmp is the host's end of QEMU's monitor (sessions on QEMU only:
	// parking); saved, a parked VM the session is restored from instead
	// of booted (Rung.Resume).
	qmp   *os.File
	saved *savedVM
	// sb is what the VM was built from (a warm pool hands it out only to
	// a trial asking for the same); pooled: booted ahead by a Pool.
	sb     sandbox
	pooled bool
	// group holds the view guest and QEMU (hostLimits).
	group *viewtrial.HostGroup
	// imageView: the host's read-only view of a trial's image (openImage);
	// erofs: the image's erofs, the VM's read-only drive; upperDrive: the
	// drive a trial's VM writes its upper dir back on (importUpper);
	// workDrive: the ext4 a trial's VM keeps its upper dir on (newWorkDrive).
	imageView  *os.File
	erofs      string
	upperDrive *os.File
	workDrive  string
	// fc: the VM runs on Firecracker (fcimage_linux.go); nil: on QEMU.
	fc *fcState
}

// The view guest's descriptors: wire.CtrlFD is its own stream; the VM's
// ports' QEMU ends follow from portFD0, in wire.VMPorts order, then
// netsim's frame socket (netFD).
const portFD0 = 4

// netFD is the view guest's (and QEMU's) descriptor of netsim's frame
// socket, after the ports.
func netFD() int { return portFD0 + len(wire.VMPorts()) }

// start starts the view guest in a mount and network namespace of its own
// (QEMU, which it becomes, then has no network but netsim's frame socket),
// with the ports' QEMU ends and that socket.
func (t *trial) start() error {
	t.settleVMM()
	if t.saved != nil && t.saved.vmm == VMMFirecracker && t.fc == nil {
		return fmt.Errorf("%w: %s", ErrParkedOnFirecracker, t.m.vmm.why)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socketpair: %w", err)
	}
	unix.SetNonblock(fds[0], true)
	t.ViewCtrl = os.NewFile(uintptr(fds[0]), "view")
	viewEnd := os.NewFile(uintptr(fds[1]), "view-guest")
	defer viewEnd.Close()
	host, vmm, err := socketPairs(len(wire.VMPorts()))
	if err != nil {
		return err
	}
	defer closeAll(vmm)
	t.ports = host
	consoleR, consoleW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer consoleW.Close()
	if t.group, err = viewtrial.NewHostGroup(t.r.Cgroups, "vm-"+t.Spec.TrialID, t.Spec.Limits, hostLimits(t.Spec.Limits, t.memMB())); err != nil {
		consoleR.Close()
		return err
	}
	attr := &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWNET,
		Pdeathsig:  syscall.SIGKILL,
	}
	t.group.Place(attr)
	t.Cmd = &exec.Cmd{
		Path:        t.exe,
		Args:        []string{"dryexec", "guest", wire.RoleGVisorView},
		Env:         []string{},
		ExtraFiles:  append(append([]*os.File{viewEnd}, vmm...), t.net.File()),
		Stdout:      consoleW,
		Stderr:      consoleW,
		SysProcAttr: attr,
	}
	if t.Cmd.ExtraFiles, err = t.fcExtraFiles(t.Cmd.ExtraFiles, vmm); err != nil {
		consoleR.Close()
		return err
	}
	vmmPark, err := t.parkFiles()
	if err != nil {
		consoleR.Close()
		return err
	}
	defer closeAll(vmmPark)
	if err := t.Cmd.Start(); err != nil {
		consoleR.Close()
		return fmt.Errorf("starting the vm's view guest: %w", err)
	}
	t.StartWait()
	if err := t.group.Attach(t.Cmd.Process.Pid); err != nil {
		// v1: before the view guest becomes QEMU (it waits for the
		// host's first request).
		consoleR.Close()
		return err
	}
	t.net.serve()
	t.console = tail.New(consoleTail)
	t.Pipes.Go(func() { viewtrial.CopyOut(t.console, consoleR) })
	t.View = wire.NewConn(t.ViewCtrl)
	t.ctrl = newHeardFile(t.ports[0])
	t.Inner = wire.NewConn(t.ctrl)
	return nil
}

// cleanup ends the VM (if it still runs) and frees everything.
func (t *trial) cleanup() {
	t.Close()
	t.closeFirecracker()
	if t.group != nil {
		// Kills what is left in it (nothing once QEMU has ended), then
		// removes it.
		if err := t.group.Remove(); err != nil && t.r.Log != nil {
			t.r.Log.Warn("removing the VM's cgroup", "trial", t.Spec.TrialID, "err", err)
		}
	}
	closeAll(t.ports)
	closeAll([]*os.File{t.qmp})
	if t.saved != nil {
		closeAll(t.saved.files)
	}
	t.closeImage()
	t.Release()
}

// prepare builds the view on the host and has the view guest become QEMU,
// exporting it.
func (t *trial) prepare() error {
	start := wire.TrialStart{Mounts: t.Mounts, Image: t.sb.image, UpperSize: t.hostUpperSize(), Masks: t.Cover.Masks, Hidden: t.Cover.Hidden}
	t.net.viewStart(&start)
	if err := t.BuildView(&start); err != nil {
		return err
	}
	t.diffAgainstImage()
	mem := t.memMB()
	var portFDs, keep []int
	for i := range wire.VMPorts() {
		portFDs = append(portFDs, portFD0+i)
		keep = append(keep, portFD0+i)
	}
	// QEMU runs from the view guest's scratch dir: the view's root is
	// "root" beneath it (wire.GVisorRoot is the same dir, named from the
	// bundle).
	cfg := vmConfig{qemu: t.m.qemu, accel: t.m.accel, kernel: t.m.kernel.Vmlinux, initramfs: t.m.initramfs,
		memMB: mem, cpus: 1, transport: t.transport, portFDs: portFDs, rootDir: "root", session: t.session}
	if t.net.File() != nil {
		cfg.netFD = netFD()
		keep = append(keep, cfg.netFD)
	}
	keep = t.parkArgs(&cfg, keep)
	t.imageDrives(&cfg)
	// The view guest's exec verb is gvisor's: write a (here unused)
	// config file, keep the ports, exec the program from the scratch dir.
	t.bootStart = time.Now()
	if t.fc != nil {
		if err := t.bootFirecracker(); err != nil {
			return err
		}
	} else if err := t.ExecView(&wire.GVisorExec{Path: t.m.qemu, Argv: cfg.argv(), Config: []byte("{}"), Keep: keep}, "QEMU"); err != nil {
		return err
	}
	if t.session {
		return nil
	}
	// The FIFOs the command makes, QEMU's 9p server cannot: the host makes
	// them through the view (guest/vmfifo_linux.go).
	return t.OpenViewRoot()
}

// memMB is the VM's RAM: the trial's memory limit (at least 128 MiB, which
// the VM's kernel needs to boot), else the rung's, else 512 MiB.
func (t *trial) memMB() int64 {
	if l := t.Spec.Limits.MemoryBytes; l > 0 {
		return max(l>>20, 128)
	}
	return cmp.Or(t.r.MemoryMB, 512)
}

// QEMUOverheadBytes is what a VM's host cgroup allows QEMU on top of the
// VM's RAM: QEMU's own code and heap, TCG's translation cache (64 MiB,
// tb-size), the 9p server's and virtio's buffers.
const QEMUOverheadBytes = 256 << 20

// qemuThreads is room in the host's pids limit for QEMU's threads (vCPUs,
// its I/O and 9p worker pools) and the view guest's: the VM's processes
// are the VM kernel's, which the host's pids limit cannot count.
const qemuThreads = 256

// hostLimits are the limits of the cgroup that holds QEMU, for a trial
// asking for l with a VM of memMB of RAM: memory the larger of the limit
// asked (default: half the host's RAM, as on ns) and the RAM, plus
// QEMUOverheadBytes: the command's memory is bounded by the VM's RAM, and
// what it writes to the view's upper dirs (a tmpfs of the host's, written
// by QEMU's 9p server) is charged to the group, as ns charges the upper
// tmpfs to the sandbox's; CPU as asked (cpu.max, cpu.weight); pids the
// limit with room for QEMU's threads (inside, the limit is RLIMIT_NPROC).
func hostLimits(l dryexec.Limits, memMB int64) dryexec.Limits {
	if l.MemoryBytes >= 0 {
		l.MemoryBytes = max(cgroup.Defaults(l).MemoryBytes, memMB<<20) + QEMUOverheadBytes
	}
	if l.Pids >= 0 {
		l.Pids = cmp.Or(l.Pids, dryexec.DefaultPids) + qemuThreads
	}
	return l
}

// limitHits are the limits the VM hit: its kernel's OOM kills (the VM's RAM
// is the command's memory), then what the host's cgroup saw (QEMU itself
// OOM-killed at hostLimits).
func (t *trial) limitHits() []dryexec.Violation {
	var v []dryexec.Violation
	if ex := t.Exit; ex != nil {
		v = t.ramHits(ex.OOMKills)
	}
	if t.group != nil {
		v = append(v, t.group.Hits()...)
	}
	return v
}

// ramHits is the limit violation of n OOM kills by the VM's kernel (none
// for n ≤ 0): the memory limit it names is the VM's RAM.
func (t *trial) ramHits(n int64) []dryexec.Violation {
	if n <= 0 {
		return nil
	}
	ram := dryexec.Limits{MemoryBytes: t.memMB() << 20}
	return cgroup.Violations(ram, 0, cgroup.Stats{}, cgroup.Stats{OOMKills: n})
}

var errOverdue = errors.New("the VM did not report in time")

// bootVM prepares the VM and waits for its guest's hello: what a warm pool
// does ahead of the trial. The boot counts against no command timeout: it
// is bounded by its own; ctx's end kills QEMU.
func (t *trial) bootVM(ctx context.Context) error {
	bootCtx, bootCancel := context.WithTimeoutCause(ctx, t.r.bootTimeout()+t.r.walkGrace(), errOverdue)
	defer bootCancel()
	stopBoot := context.AfterFunc(bootCtx, t.Kill)
	defer stopBoot()
	if err := t.prepare(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("trial %s: %w", t.Spec.TrialID, context.Cause(ctx))
		}
		return err
	}
	if err := t.Hello(t.Inner, wire.RoleVMTrial); err != nil {
		if bootCtx.Err() != nil {
			return fmt.Errorf("trial %s: the VM did not boot within %v: %w", t.Spec.TrialID, t.r.bootTimeout()+t.r.walkGrace(), err)
		}
		return err
	}
	t.boot = time.Since(t.bootStart)
	t.r.trace("hello")
	return nil
}

// run prepares the VM, runs the command and builds the delta.
func (t *trial) run(ctx context.Context) (*dryexec.StateDelta, error) {
	a := t.Spec.Action
	outer := ctx
	if !t.pooled {
		if err := t.bootVM(ctx); err != nil {
			return nil, err
		}
	}
	// netsim started with the boot; the command needs it now.
	if err := t.net.ready(ctx); err != nil {
		return nil, err
	}
	if a.TimeoutMS > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, a.Timeout()+t.r.walkGrace(), errOverdue)
		defer cancel()
	}
	// A VM that falls silent while its command runs is hung: without a
	// timeout nothing else would end the trial.
	ctx, silent := context.WithCancelCause(ctx)
	defer silent(nil)
	stopWatch := t.ctrl.watch(t.r.silenceLimit(), silent)
	defer stopWatch()
	// Cancelling ctx kills QEMU, which breaks every stream.
	stop := context.AfterFunc(ctx, t.Kill)
	defer stop()
	t.Out, t.Errb = tail.New(t.Spec.OutputCap), tail.New(t.Spec.OutputCap)
	err := t.converse()
	stopWatch()
	cause := context.Cause(ctx)
	vmFault := errors.Is(cause, errOverdue) || errors.Is(cause, errSilent)
	if err != nil && !t.Sent {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("trial %s: %w", t.Spec.TrialID, cause)
		}
		return nil, err
	}
	if err != nil && ctx.Err() != nil && !vmFault {
		return nil, fmt.Errorf("trial %s: %w", t.Spec.TrialID, ctx.Err())
	}
	switch {
	case err != nil && errors.Is(cause, errOverdue):
		err = fmt.Errorf("%w: no report within the command's timeout and %v more", dryexec.ErrGuest, t.r.walkGrace())
	case err != nil && errors.Is(cause, errSilent):
		err = fmt.Errorf("%w: %w", dryexec.ErrGuest, cause)
	}
	// Every write of the VM is in the upper dirs once QEMU (its 9p
	// server) has ended: the host walks them only then. The VM resets
	// itself after trial.done; a VM that does not is killed.
	if err != nil {
		t.Kill()
	}
	select {
	case <-t.Waited:
	case <-time.After(t.r.walkGrace()):
		t.Kill()
		<-t.Waited
	case <-ctx.Done():
		t.Kill()
		<-t.Waited
	}
	if err != nil {
		if p := t.kernelPanicked(); p != "" {
			err = fmt.Errorf("the VM's kernel panicked (%s): %w", p, err)
		}
	}
	// Every frame the VM sent is on netsim's socket: its log is final once
	// it has drained them.
	t.net.close()
	t.r.trace("gone")
	// On an image, the VM's writes are on its upper drive until now.
	if ierr := t.importUpper(outer); ierr != nil && err == nil {
		err = ierr
	}
	d := &dryexec.StateDelta{}
	d.Violations = append(d.Violations, t.limitHits()...)
	d.Warnings = append(d.Warnings, t.group.Warnings...)
	t.net.report(t.Spec, d)
	// Which accelerator ran, and the boot's cost, are part of the record:
	// TCG and KVM differ by an order of magnitude in speed, not in what
	// the command may do.
	d, err = t.Report(outer, err, d, t.bootNote()+t.m.vmm.deltaNote())
	t.net.crashed(d)
	return d, err
}

// converse starts the command in the VM and reads how it ended.
func (t *trial) converse() error {
	sendStub := func(req []byte) error {
		stubW := t.ports[4]
		_, err := stubW.Write(req)
		// Half-closed, not closed: the VM sees the end of the request, and
		// the socket stays open for QEMU's chardev.
		shutWrite(stubW)
		return err
	}
	return t.Converse(t.net.trustEnv, sendStub, t.startIO)
}

// startIO copies the command's output into the delta's buffers (and the
// caller's live writers), and its stdin from the caller.
func (t *trial) startIO() {
	spec := t.Spec
	outR, errR, stdinW := t.ports[1], t.ports[2], t.ports[3]
	t.Pipes.Go(func() { io.Copy(t.Out.Tee(spec.Stdout), outR) })
	t.Pipes.Go(func() { io.Copy(t.Errb.Tee(spec.Stderr), errR) })
	if spec.Stdin != nil {
		go func() {
			io.Copy(stdinW, spec.Stdin)
			shutWrite(stdinW)
		}()
	} else {
		shutWrite(stdinW)
	}
}

// shutWrite half-closes the socket f (the VM sees the end of what was
// written; the socket stays open for QEMU's chardev). Through the file's
// own reference count, not f.Fd(): the stdin copier ends whenever the
// caller's stdin does, possibly after the trial's cleanup closed f, and a
// number read by Fd() then may be another file's (the race detector caught
// the read against the close).
func shutWrite(f *os.File) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) { unix.Shutdown(int(fd), unix.SHUT_WR) })
}
