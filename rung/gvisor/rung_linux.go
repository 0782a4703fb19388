package gvisor

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/cgroup"
	"github.com/dryexec/dryexec/internal/bootstamp"
	"github.com/dryexec/dryexec/internal/guestexe"
	"github.com/dryexec/dryexec/internal/tail"
	"github.com/dryexec/dryexec/rung/internal/viewtrial"
	"github.com/dryexec/dryexec/rung/linuxns"
	"github.com/dryexec/dryexec/wire"
)

// Name is the rung's contract name.
const Name = "gvisor"

// RunscEnv names the runsc binary to use instead of the one found on PATH
// or installed by `make` ($(go env GOPATH)/bin/runsc).
const RunscEnv = "DRYEXEC_RUNSC"

// RunscVersion is the runsc `make` installs (go install gvisor.dev/gvisor/runsc@RunscVersion).
const RunscVersion = "v0.0.0-20260905035102-160fafc42237"

// DefaultPlatform is the gVisor platform used unless Rung.Platform says
// otherwise: systrap needs no virtualisation (KVM is not usable in a nested
// VM without it) and is faster than ptrace.
const DefaultPlatform = "systrap"

// Rung runs trials in gVisor. The zero value is ready to use; it runs as root
// only (Available says so otherwise).
type Rung struct {
	// Runsc is the runsc binary; empty means $DRYEXEC_RUNSC, else runsc on
	// PATH, else $GOPATH/bin/runsc (where `make` installs it).
	Runsc string
	// Platform is runsc's --platform; empty means DefaultPlatform.
	Platform string
	// RunscFlags are more of runsc's global flags, after dryexec's own (a
	// later flag wins): tuning, debugging (--debug --debug-log=DIR/).
	RunscFlags []string
	// GuestExe is the guest binary (guestexe.Executable when empty): it builds
	// the view on the host and supervises the command inside gVisor.
	GuestExe string
	// Log receives debug records; nil logs nothing.
	Log *slog.Logger
	// WalkGrace bounds how long the sandbox may take to report and end after
	// the command's own timeout; 0 means 60s.
	WalkGrace time.Duration
	// CollectMin and CollectTimeout are linuxns.Rung's: how long a trial
	// gets, after its command, to hash and store what it wrote.
	CollectMin, CollectTimeout time.Duration
	// Cgroups says where sandboxes' cgroups are made (see package cgroup).
	Cgroups cgroup.Options
	// Trace, when set, is called as a trial passes each phase ("view": the
	// overlays are built, "hello": the guest runs inside gVisor, "exit": the
	// command and its descendants are gone, "gone": the sandbox has ended,
	// "done": the delta is built).
	Trace func(phase string)
}

var _ dryexec.Rung = (*Rung)(nil)

// Name implements dryexec.Rung.
func (r *Rung) Name() string { return Name }

func (r *Rung) trace(phase string) {
	if r.Trace != nil {
		r.Trace(phase)
	}
}

func (r *Rung) platform() string { return cmp.Or(r.Platform, DefaultPlatform) }

func (r *Rung) walkGrace() time.Duration { return cmp.Or(r.WalkGrace, 60*time.Second) }

func unavailable(missing string) error {
	return &dryexec.IsolationUnavailableError{Rung: Name, Missing: missing}
}

// FindRunsc returns the runsc binary: path if set, else $DRYEXEC_RUNSC,
// else runsc on PATH, else $GOPATH/bin/runsc (or ~/go/bin/runsc).
func FindRunsc(path string) (string, error) {
	if path = cmp.Or(path, os.Getenv(RunscEnv)); path != "" {
		return exec.LookPath(path)
	}
	if p, err := exec.LookPath("runsc"); err == nil {
		return filepath.Abs(p)
	}
	var cands []string
	if b := os.Getenv("GOBIN"); b != "" {
		cands = append(cands, filepath.Join(b, "runsc"))
	}
	for _, gp := range filepath.SplitList(os.Getenv("GOPATH")) {
		cands = append(cands, filepath.Join(gp, "bin", "runsc"))
	}
	// $HOME, else the passwd entry's home: a service or a cleaned
	// environment (env -i, some sudo setups) has no HOME, and `make`
	// installed runsc in that user's ~/go/bin.
	h, err := os.UserHomeDir()
	if err != nil {
		if u, uerr := user.Current(); uerr == nil {
			h, err = u.HomeDir, nil
		}
	}
	if err == nil && h != "" {
		cands = append(cands, filepath.Join(h, "go", "bin", "runsc"))
	}
	for _, c := range cands {
		if st, err := os.Stat(c); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return c, nil
		}
	}
	return "", fmt.Errorf("runsc not found on PATH nor in $GOPATH/bin (`make` installs it: go install gvisor.dev/gvisor/runsc@%s; or set %s)", RunscVersion, RunscEnv)
}

// Available runs runsc: `runsc --platform=P --network=none do true` must
// succeed. Looking for the binary would not do: runsc may be there and
// unable to start a sandbox (no permission for its namespaces, a platform
// the host cannot give, a seccomp profile in the way). A success is
// remembered until the next boot (probeStamp), since the probe costs about
// as much as a trial and every `dryexec run` asks; a failure never is.
func (r *Rung) Available(ctx context.Context) error {
	if os.Geteuid() != 0 {
		return unavailable("root: the gvisor rung runs runsc as root (rootless runsc is not supported yet)")
	}
	runsc, err := FindRunsc(r.Runsc)
	if err != nil {
		return unavailable(err.Error())
	}
	stamp := probeStamp(runsc, r.platform())
	if stamp != "" {
		if _, err := os.Stat(stamp); err == nil {
			return nil
		}
	}
	// runsc's state goes beside the stamps, not in TMPDIR: a probe must
	// leave no trace in the caller's directories (not even a directory's
	// mtime; the fidelity harness checks).
	base := ""
	if stamp != "" {
		base = filepath.Dir(stamp)
	}
	state, err := os.MkdirTemp(base, "probe-")
	if err != nil {
		return unavailable("a directory for runsc's state: " + err.Error())
	}
	defer os.RemoveAll(state)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, runsc, "--root", state, "--platform="+r.platform(), "--network=none",
		"--ignore-cgroups", "do", "/bin/true")
	cmd.Dir = state
	var out tailWriter
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(out.String())
		if msg != "" {
			msg = ": " + msg
		}
		return unavailable(fmt.Sprintf("%s --platform=%s do /bin/true failed (%v)%s", runsc, r.platform(), err, msg))
	}
	if stamp != "" {
		// Best effort: without the stamp the next call probes again.
		os.WriteFile(stamp, nil, 0o600)
	}
	return nil
}

// probeDir keeps the probe's stamps and its runsc state. /run is a tmpfs
// that a reboot empties, and the rung runs as root, who alone may write it.
const probeDir = "/run/dryexec/gvisor-probe"

// probeStamp is the file whose presence says that this runsc, with this
// platform and this pinned version, started a sandbox on this boot.
func probeStamp(runsc, platform string) string {
	return bootstamp.Path(probeDir, runsc, platform, RunscVersion)
}

// tailWriter keeps the last 2 KiB written to it (runsc's error output).
type tailWriter struct {
	mu sync.Mutex
	b  []byte
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	if len(w.b) > 2048 {
		w.b = w.b[len(w.b)-2048:]
	}
	return len(p), nil
}

func (w *tailWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(bytes.ToValidUTF8(w.b, []byte("?")))
}

// Trial implements dryexec.Rung.
func (r *Rung) Trial(ctx context.Context, spec dryexec.TrialSpec) (*dryexec.StateDelta, error) {
	spec = spec.WithDefaults()
	if spec.Image != nil {
		return r.imageTrial(ctx, spec)
	}
	if err := linuxns.CheckAction(spec.Action); err != nil {
		return nil, err
	}
	if spec.TrialID == "" {
		spec.TrialID = dryexec.NewTrialID()
	}
	b, err := r.newBox(ctx, spec.TrialID, spec.Masks, spec.NoDefaultMasks, spec.OwnPaths, spec.Net, spec.NetCADir)
	if err != nil {
		return nil, err
	}
	return b.trial(ctx, spec)
}

// trial runs spec's command in a sandbox over b's view.
func (b *box) trial(ctx context.Context, spec dryexec.TrialSpec) (*dryexec.StateDelta, error) {
	defer b.net.Close()
	b.limits, b.upperSize = spec.Limits, spec.UpperSizeBytes
	t := &trial{box: b}
	t.Spec = spec
	defer t.cleanup()
	if err := t.start(); err != nil {
		return nil, err
	}
	return t.run(ctx)
}

// newBox resolves what every sandbox of the rung needs: runsc, the host's
// mount plan, the masks (netsim's CA key among them) and the network.
func (r *Rung) newBox(ctx context.Context, id string, masks []string, noDefault bool, own, net []string, caDir string) (*box, error) {
	if os.Geteuid() != 0 {
		return nil, unavailable("root: the gvisor rung runs runsc as root (rootless runsc is not supported yet)")
	}
	runsc, err := FindRunsc(r.Runsc)
	if err != nil {
		return nil, unavailable(err.Error())
	}
	mounts, err := linuxns.Mounts()
	if err != nil {
		return nil, err
	}
	// netsim's CA key is masked in every sandbox, as on ns, whether or
	// not this one has a network: it signs what sandboxes trust.
	caDir, err = linuxns.EnsureCA(caDir)
	if err != nil {
		return nil, err
	}
	cover, err := linuxns.ResolveCover(append(slices.Clone(masks), caDir), noDefault, own)
	if err != nil {
		return nil, err
	}
	// The same netsim as an ns sandbox's, serving a TUN device in the view
	// guest's network namespace, which runsc hands to gVisor's netstack.
	nw, err := linuxns.NewNet(ctx, net, caDir, id)
	if err != nil {
		return nil, err
	}
	b := r.box(id, runsc, nw)
	b.Mounts, b.Cover = mounts, cover
	return b, nil
}

// box is a sandbox of id that runs runsc with network nw, before its view
// (Mounts, Cover) is set.
func (r *Rung) box(id, runsc string, nw *linuxns.Net) *box {
	b := &box{r: r, id: id, runsc: runsc, net: nw}
	b.ScratchFD = -1
	b.Rung, b.What, b.TailName, b.Tail = Name, "the gvisor sandbox", "runsc", b.runscErr.String
	b.Trace, b.Log, b.CollectMin, b.CollectTimeout = r.Trace, r.Log, r.CollectMin, r.CollectTimeout
	return b
}

// box is one gVisor sandbox over a view dryexec owns: the view guest (which
// becomes runsc), its cgroup and network, and the host's handle on the
// view's upper dirs. A trial and a session each hold one.
type box struct {
	viewtrial.Trial
	r     *Rung
	id    string // the trial's or session's id: the cgroup's and container's name
	runsc string

	// image is the sandbox's root filesystem on an image (nil: the
	// host's), imageView the host's read-only view of it (image_linux.go).
	image     *dryexec.ImageRoot
	imageView *os.File

	limits    dryexec.Limits
	upperSize int64

	runscErr  tailWriter // runsc's own error output
	runscErrR *os.File

	// ctrlIn, for a session on the host's view, is the guest's control
	// socket, given to runsc as its stdin rather than with --pass-fd: runsc
	// restore re-imports a checkpointed sandbox's stdio from its own, and
	// has no --pass-fd (fork_linux.go). ctrlStdin says the guest finds it
	// there; restoreFrom, when set, is the checkpoint runsc restores from
	// instead of starting the guest.
	ctrlIn      *os.File
	ctrlStdin   bool
	restoreFrom string

	net      *linuxns.Net
	trustEnv []string // netsim's trust variables for the command

	// group holds the view guest, runsc and its sandbox (hostLimits).
	group     *viewtrial.HostGroup
	limitHits []dryexec.Violation // the group's, once the sandbox is gone
	warnings  []string
}

// trial is one trial's sandbox and the host ends of its command's
// descriptors.
type trial struct {
	*box
	innerCtrl *os.File
	outR      *os.File
	errR      *os.File
	stdinW    *os.File
	stubW     *os.File
}

// Descriptors of the view guest: wire.CtrlFD is its own stream; the inner
// guest's descriptors follow from innerFD0, and runsc passes each into the
// sandbox at the number the ns guest has it (--pass-fd); the TUN hand-over
// socket, when the sandbox has netsim, comes after them.
const innerFD0 = 4

// trialFDs are the numbers a trial guest has its descriptors at inside
// gVisor, in the order start passes them.
var trialFDs = []int{wire.CtrlFD, wire.StdoutFD, wire.StderrFD, wire.StdinFD, wire.StubFD, wire.GVisorLogFD}

func pair(name string) (*os.File, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	// Non-blocking: the runtime poller owns our end, and Close
	// interrupts a Read in progress.
	unix.SetNonblock(fds[0], true)
	return os.NewFile(uintptr(fds[0]), name), os.NewFile(uintptr(fds[1]), name+"-guest"), nil
}

// start makes the trial's descriptors and starts its view guest.
func (t *trial) start() error {
	var ends []*os.File
	defer func() {
		for _, f := range ends {
			f.Close()
		}
	}()
	var err error
	var innerEnd, outW, errW, stdinR, stubR *os.File
	if t.innerCtrl, innerEnd, err = pair("inner"); err != nil {
		return err
	}
	ends = append(ends, innerEnd)
	for _, p := range []struct{ r, w, guest **os.File }{{&t.outR, &outW, &outW}, {&t.errR, &errW, &errW},
		{&stdinR, &t.stdinW, &stdinR}, {&stubR, &t.stubW, &stubR}} {
		if *p.r, *p.w, err = os.Pipe(); err != nil {
			return err
		}
		ends = append(ends, *p.guest)
	}
	// runsc's log, for its strace of the calls that make a FIFO: the trial
	// guest reads it (wire.GVisorLogFD) to find the FIFOs gVisor kept in its
	// own memory. A memfd: runsc's log never counts against the write
	// budget, and goes with the last descriptor.
	logFD, err := unix.MemfdCreate("runsc-log", unix.MFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("runsc's log: %w", err)
	}
	runscLog := os.NewFile(uintptr(logFD), "runsc-log")
	ends = append(ends, runscLog)
	if err := t.box.start([]*os.File{innerEnd, outW, errW, stdinR, stubR, runscLog}); err != nil {
		return err
	}
	t.Inner = wire.NewConn(t.innerCtrl)
	return nil
}

// start starts the view guest in a mount namespace of its own, in the
// sandbox's cgroup, with inner (the descriptors the inner guest gets, from
// innerFD0 on) and the TUN hand-over socket.
func (b *box) start(inner []*os.File) error {
	viewCtrl, viewEnd, err := pair("view")
	if err != nil {
		return err
	}
	b.ViewCtrl = viewCtrl
	defer viewEnd.Close()
	var runscErrW *os.File
	if b.runscErrR, runscErrW, err = os.Pipe(); err != nil {
		return err
	}
	defer runscErrW.Close()

	if b.group, err = viewtrial.NewHostGroup(b.r.Cgroups, "gv-"+b.id, b.limits, b.hostLimits()); err != nil {
		return err
	}
	b.warnings = append(b.warnings, b.group.Warnings...)

	exe := b.r.GuestExe
	if exe == "" {
		exe = guestexe.Executable()
	}
	attr := &syscall.SysProcAttr{
		// A mount namespace for the view and a network namespace for
		// netsim's TUN device (runsc's --network=sandbox takes the
		// sandbox's links from there); runsc makes the sandbox's other
		// namespaces itself. The view guest (then runsc) dies with us.
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWNET,
		Pdeathsig:  syscall.SIGKILL,
	}
	extra := append([]*os.File{viewEnd}, inner...)
	if g := b.net.GuestFile(); g != nil {
		extra = append(extra, g)
	}
	b.group.Place(attr)
	b.Cmd = &exec.Cmd{
		Path:        exe,
		Args:        []string{"dryexec", "guest", wire.RoleGVisorView},
		Env:         []string{},
		ExtraFiles:  extra,
		Stderr:      runscErrW,
		SysProcAttr: attr,
	}
	if b.ctrlIn != nil {
		b.Cmd.Stdin, b.ctrlStdin = b.ctrlIn, true
	}
	if err := b.Cmd.Start(); err != nil {
		return fmt.Errorf("starting the gvisor view guest: %w", err)
	}
	b.StartWait()
	runscErrR := b.runscErrR
	b.runscErrR = nil
	b.Pipes.Go(func() { viewtrial.CopyOut(&b.runscErr, runscErrR) })
	// v1: before the view guest becomes runsc (it waits for the host's
	// first request).
	if err := b.group.Attach(b.Cmd.Process.Pid); err != nil {
		return err
	}
	b.net.Serve(context.Background())
	b.View = wire.NewConn(b.ViewCtrl)
	return nil
}

// netFD is the view guest's number of the TUN hand-over socket, after
// inner descriptors.
func netFD(inner int) int { return innerFD0 + inner }

// hostLimits are the limits of the cgroup that holds runsc and its
// sandbox: the sandbox's memory and CPU; the pids limit bounds gVisor's
// own threads and helper processes (a sandbox's processes are not host
// processes), so it is the sandbox's with room for those.
func (b *box) hostLimits() dryexec.Limits {
	l := b.limits
	if l.Pids >= 0 {
		l.Pids = cmp.Or(l.Pids, dryexec.DefaultPids) + runscThreads
	}
	return l
}

// runscThreads is room in the host's pids limit for runsc, its gofer and
// its sentry's threads.
const runscThreads = 512

// cleanup ends the sandbox (if it still runs) and frees everything.
func (t *trial) cleanup() {
	for _, f := range []*os.File{t.innerCtrl, t.stdinW, t.stubW, t.outR, t.errR} {
		if f != nil {
			f.Close()
		}
	}
	t.box.cleanup()
}

// cleanup ends the sandbox (if it still runs) and frees what the host
// holds of it but its network (the caller's to close).
func (b *box) cleanup() {
	b.Close()
	if b.group != nil {
		// Kills what runsc left (its sandbox and gofer processes are in
		// the group), then removes it.
		if err := b.group.Remove(); err != nil && b.r.Log != nil {
			b.r.Log.Warn("removing the sandbox's cgroup", "sandbox", b.id, "err", err)
		}
	}
	if b.runscErrR != nil {
		b.runscErrR.Close()
	}
	b.Release()
	if b.imageView != nil {
		b.imageView.Close()
	}
}

// prepare builds the view, pins the masks, and has the view guest become
// runsc, running the inner guest as role with the descriptors start gave
// it (at the numbers in innerFDs).
func (b *box) prepare(ctx context.Context, role string, innerFDs []int) error {
	start := wire.TrialStart{Mounts: b.Mounts, Image: b.imageLayers(), UpperSize: b.upperSize, Masks: b.Cover.Masks, Hidden: b.Cover.Hidden}
	if b.net.GuestFile() != nil {
		// What a session guest gets for its TUN device and trust files
		// is what the view guest needs: the same fields, and the trust
		// variables for the command.
		var ss wire.SessionStart
		b.net.SetupSession(&ss, netFD(len(innerFDs)))
		start.Net, start.NetFD, start.TrustBundle, start.TrustPath = ss.Net, ss.NetFD, ss.TrustBundle, ss.TrustPath
		b.trustEnv = ss.Env
	}
	if b.restoreFrom != "" {
		// A fork's branch: its upper dirs start as the parent's were.
		if err := b.seedUppers(&start); err != nil {
			return err
		}
	}
	if err := b.BuildView(&start); err != nil {
		return err
	}
	b.diffAgainstImage()
	cfg, err := b.ociSpec(role)
	if err != nil {
		return err
	}
	argv := b.runscArgv()
	if i := slices.Index(innerFDs, wire.GVisorLogFD); i >= 0 {
		// The strace the trial guest finds FIFOs by (guest.sandboxFIFOs),
		// of those calls alone; runsc reopens the log by its /proc path.
		argv = append(argv, "--strace", "--strace-syscalls="+wire.GVisorTracedCalls,
			"--debug-log=/proc/self/fd/"+strconv.Itoa(innerFD0+i))
	}
	argv = append(argv, b.r.RunscFlags...)
	if b.restoreFrom != "" {
		// The checkpoint's own processes, not the guest: its stdio (the
		// control socket among it) re-imported from runsc's.
		if err := b.checkUppers(); err != nil {
			return err
		}
		img, err := viaRoot(filepath.Join(b.restoreFrom, kernelDir))
		if err != nil {
			return err
		}
		argv = append(argv, "restore", "--image-path", img, "--bundle", wire.GVisorBundle)
	} else {
		argv = append(argv, "run", "--bundle", wire.GVisorBundle)
	}
	var keep []int
	for i, fd := range innerFDs {
		keep = append(keep, innerFD0+i)
		argv = append(argv, "--pass-fd", strconv.Itoa(innerFD0+i)+":"+strconv.Itoa(fd))
	}
	argv = append(argv, b.container())
	return b.ExecView(&wire.GVisorExec{Path: b.runsc, Argv: argv, Config: cfg, Keep: keep}, "runsc")
}

// runscArgv is runsc and dryexec's global flags for this sandbox, as its
// run, checkpoint and restore all take them: the view as the root with
// runsc's overlay off (every write lands in our upper dirs);
// --file-access=shared, so that gVisor asks the host for what it reads
// (with its default, exclusive, it answered a read of an empty mask from its
// own cache, and the host never saw the read); with netsim,
// --network=sandbox takes the TUN device from the view guest's namespace,
// and --gso=false, as with host segmentation offload gVisor handed the
// device segments netsim cannot take (DNS over UDP went through, no TCP
// connection did).
func (b *box) runscArgv() []string {
	argv := []string{b.runsc, "--root", wire.GVisorState, "--platform=" + b.r.platform(),
		"--overlay2=none", "--ignore-cgroups", "--file-access=shared"}
	if b.net.GuestFile() != nil {
		return append(argv, "--network=sandbox", "--gso=false")
	}
	return append(argv, "--network=none")
}

// container is the sandbox's container id in runsc's state.
func (b *box) container() string { return "dryexec-" + b.id }

// run prepares the sandbox, runs the command and builds the delta.
func (t *trial) run(ctx context.Context) (*dryexec.StateDelta, error) {
	a := t.Spec.Action
	outer := ctx
	if a.TimeoutMS > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, a.Timeout()+t.r.walkGrace(), errOverdue)
		defer cancel()
	}
	// Cancelling ctx kills runsc, which breaks every stream.
	stop := context.AfterFunc(ctx, t.Kill)
	defer stop()
	if err := t.prepare(ctx, wire.RoleGVisorTrial, trialFDs); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("trial %s: %w", t.Spec.TrialID, context.Cause(ctx))
		}
		return nil, err
	}
	t.Out, t.Errb = tail.New(t.Spec.OutputCap), tail.New(t.Spec.OutputCap)
	err := t.converse()
	if err != nil && !t.Sent {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("trial %s: %w", t.Spec.TrialID, context.Cause(ctx))
		}
		return nil, err
	}
	if err != nil && ctx.Err() != nil && !errors.Is(context.Cause(ctx), errOverdue) {
		return nil, fmt.Errorf("trial %s: %w", t.Spec.TrialID, ctx.Err())
	}
	if err != nil && errors.Is(context.Cause(ctx), errOverdue) {
		err = fmt.Errorf("%w: no report within the command's timeout and %v more", dryexec.ErrGuest, t.r.walkGrace())
	}
	// Every write of the sandbox is in the upper dirs once runsc (and so
	// its sandbox) has ended: the host walks them only then.
	if err != nil {
		t.Kill()
	}
	select {
	case <-t.Waited:
	case <-ctx.Done():
		t.Kill()
		<-t.Waited
	}
	// Every packet the sandbox sent has reached netsim: its log is final.
	t.net.Close()
	if t.group != nil {
		// What the sandbox hit, read before the group goes: runsc's
		// sandbox and gofer may outlive runsc for a moment, and removing
		// the group kills them.
		t.limitHits = t.group.Hits()
		t.group.Remove()
	}
	t.r.trace("gone")
	return t.report(outer, err)
}

var errOverdue = errors.New("the gvisor sandbox did not report in time")

// converse starts the command inside gVisor and reads how it ended.
func (t *trial) converse() error {
	if err := t.Hello(t.Inner, wire.RoleGVisorTrial); err != nil {
		return err
	}
	t.r.trace("hello")
	if err := t.oomOrder(); err != nil {
		return err
	}
	// The pids limit inside gVisor: the sandbox's processes are gVisor's,
	// not the host's, so the host's pids limit (the cgroup's) cannot count
	// them; gVisor enforces RLIMIT_NPROC, which the stub puts on the
	// command, as ns's rlimit fallback does.
	sendStub := func(req []byte) error {
		_, err := t.stubW.Write(req)
		t.stubW.Close()
		t.stubW = nil
		return err
	}
	return t.Converse(t.trustEnv, sendStub, t.startIO)
}

// startIO copies the command's output into the delta's buffers (and the
// caller's live writers), and its stdin from the caller.
func (t *trial) startIO() {
	spec := t.Spec
	outR, errR := t.outR, t.errR
	t.outR, t.errR = nil, nil
	t.Pipes.Go(func() { viewtrial.CopyOut(t.Out.Tee(spec.Stdout), outR) })
	t.Pipes.Go(func() { viewtrial.CopyOut(t.Errb.Tee(spec.Stderr), errR) })
	if stdinW := t.stdinW; spec.Stdin != nil {
		go func() {
			io.Copy(stdinW, spec.Stdin)
			stdinW.Close()
		}()
	} else {
		stdinW.Close()
	}
	t.stdinW = nil
}

// report builds the delta: what runsc's cgroup and netsim saw, then the
// walk of the upper dirs (viewtrial.Trial.Report).
func (t *trial) report(ctx context.Context, cause error) (*dryexec.StateDelta, error) {
	d := &dryexec.StateDelta{}
	d.Violations = append(d.Violations, t.limitHits...)
	d.Network = t.net.Log()
	if w := t.net.Warning(); w != "" {
		d.Warnings = append(d.Warnings, w)
	}
	if recs := t.net.Records(); t.Spec.Exchanges != nil && len(recs) > 0 {
		b, err := json.Marshal(recs)
		if err == nil {
			err = t.Spec.Exchanges.PutExchanges(b)
		}
		if err != nil {
			d.Warnings = append(d.Warnings, "the network exchanges' bodies were not kept: "+err.Error())
		}
	}
	d.Warnings = append(d.Warnings, t.warnings...)
	return t.Report(ctx, cause, d)
}

// Notes are what `dryexec doctor` says of an available gvisor rung: which
// runsc and platform it runs, and what differs from ns.
func (r *Rung) Notes() []string {
	runsc, _ := FindRunsc(r.Runsc)
	return []string{
		"runsc: " + runsc + " --platform=" + r.platform() + " (probed by running it)",
		"network: netsim, as on ns, through a TUN device that runsc's --network=sandbox serves to gVisor's netstack",
		"limits: memory and CPU of runsc's whole sandbox by cgroup; pids as RLIMIT_NPROC inside gVisor (hitting it is not recorded) and, with room for runsc, on its host threads by cgroup",
	}
}
