package linuxns

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/cgroup"
	"github.com/dryexec/dryexec/fsdelta"
	"github.com/dryexec/dryexec/internal/guestexe"
	"github.com/dryexec/dryexec/internal/tail"
	"github.com/dryexec/dryexec/wire"
)

// Name is the rung's contract name.
const Name = "ns"

// Defaults of Rung.CollectMin and Rung.CollectTimeout.
const (
	DefaultCollectMin     = 5 * time.Second
	DefaultCollectTimeout = 5 * time.Minute
)

// collectDeadline is when a trial whose command was started at start and
// ended at end must be done hashing and storing content: the end of its
// timeout, but never less than half the timeout (at least CollectMin) after
// the command, so that a command that used its whole timeout still has time
// to be collected, and a trial ends within 1.5 times its timeout; without a
// timeout, CollectTimeout after the command.
func (r *Rung) collectDeadline(a dryexec.Action, start, end time.Time) time.Time {
	if a.TimeoutMS <= 0 {
		return end.Add(cmp.Or(r.CollectTimeout, DefaultCollectTimeout))
	}
	dl := start.Add(a.Timeout())
	if least := end.Add(max(cmp.Or(r.CollectMin, DefaultCollectMin), a.Timeout()/2)); dl.Before(least) {
		dl = least
	}
	return dl
}

// Rung runs trials in Linux namespaces. The zero value is ready to use.
type Rung struct {
	// GuestExe is the binary started as the guest supervisor with
	// `guest ns-trial`; empty means guestexe.Executable() (dryexec-guest beside
	// the running binary, else the running binary, which must then call
	// guest.MaybeMain first thing in main: the dryexec CLI and our tests do).
	GuestExe string
	// Log receives debug records; nil logs nothing.
	Log *slog.Logger
	// WalkGrace bounds how long the guest may take to report its upper dirs after
	// the command's own timeout; 0 means 60s.
	WalkGrace time.Duration
	// CollectMin is the least time a trial with a timeout gets, after its
	// command, to hash and store what it wrote, when the command left less
	// of the timeout than that (or than half the timeout, if more); 0 means
	// DefaultCollectMin. CollectTimeout
	// is that time for a trial without a timeout; 0 means
	// DefaultCollectTimeout. Past it the delta lists the remaining files with
	// their sizes but without their content, and says it is incomplete
	// (docs/limits.md).
	CollectMin, CollectTimeout time.Duration
	// Trace, when set, is called as a trial passes each phase ("start": guest
	// process started, "hello": guest runtime up, "view": overlays mounted,
	// "exit": command and its descendants gone, "done": delta built,
	// "reaped": the guest waited for, "cleaned": netsim and the trial's
	// cgroups gone too), to see
	// where a trial's time goes. Nil costs nothing.
	Trace func(phase string)
	// Cgroups says where sandboxes' cgroups are made (zero: see package
	// cgroup); the limits themselves come from each TrialSpec.
	Cgroups cgroup.Options

	// hooks are the tests' (hooks_testhooks_linux.go); empty in a release
	// build.
	hooks testHooks
}

func (r *Rung) trace(phase string) {
	if r.Trace != nil {
		r.Trace(phase)
	}
}

var _ dryexec.Rung = (*Rung)(nil)

// Name implements dryexec.Rung.
func (r *Rung) Name() string { return Name }

// Available checks what the rung needs from the kernel without starting anything.
func (r *Rung) Available(ctx context.Context) error {
	miss := func(s string) error { return &dryexec.IsolationUnavailableError{Rung: Name, Missing: s} }
	if _, err := os.Stat("/proc/self/ns/user"); err != nil {
		return miss("kernel without user namespaces (/proc/self/ns/user)")
	}
	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil && strings.TrimSpace(string(b)) == "0" {
		return miss("user namespaces disabled (user.max_user_namespaces = 0)")
	}
	if b, err := os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone"); err == nil && os.Geteuid() != 0 && strings.TrimSpace(string(b)) == "0" {
		return miss("unprivileged user namespaces disabled (kernel.unprivileged_userns_clone = 0)")
	}
	if b, err := os.ReadFile("/proc/filesystems"); err != nil || !strings.Contains(string(b), "\toverlay\n") {
		return miss("no overlayfs in /proc/filesystems (modprobe overlay)")
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil && !kernelAtLeast(unix.ByteSliceToString(u.Release[:]), 5, 11) {
		return miss("kernel " + unix.ByteSliceToString(u.Release[:]) + " is older than 5.11 (overlayfs in a user namespace)")
	}
	return nil
}

func kernelAtLeast(release string, major, minor int) bool {
	var ma, mi int
	fmt.Sscanf(release, "%d.%d", &ma, &mi)
	return ma > major || (ma == major && mi >= minor)
}

// Trial implements dryexec.Rung: a cold trial prepares a sandbox for spec and
// runs spec's command in it at once (a Pool prepares them ahead).
func (r *Rung) Trial(ctx context.Context, spec dryexec.TrialSpec) (*dryexec.StateDelta, error) {
	spec, sb, err := checkBase(spec)
	if err != nil {
		return nil, err
	}
	t, err := r.prepare(ctx, sb, spec.TrialID, viewOf(spec, nil), false)
	if err != nil {
		return nil, err
	}
	defer t.cleanup()
	return t.trial(ctx, spec)
}

// checkSpec fills spec's defaults and id, checks its action, and says what
// sandbox it needs (with the host's mounts and masks from hc).
func checkSpec(spec dryexec.TrialSpec, hc *hostCache) (dryexec.TrialSpec, sandbox, error) {
	spec, sb, err := checkBase(spec)
	if err == nil {
		err = viewOf(spec, hc)(&sb)
	}
	return spec, sb, err
}

// checkBase is checkSpec without the sandbox's view of the host (its
// mounts and masks, which viewOf adds): what the guest's start needs.
func checkBase(spec dryexec.TrialSpec) (dryexec.TrialSpec, sandbox, error) {
	spec = spec.WithDefaults()
	if err := checkAction(spec.Action, spec.Image != nil); err != nil {
		return spec, sandbox{}, err
	}
	if spec.TrialID == "" {
		spec.TrialID = dryexec.NewTrialID()
	}
	sb, err := sandboxBase(spec)
	return spec, sb, err
}

// hostCache is what a Pool remembers about the host between trials, each
// part until the host changes it: the mount plan and the resolved masks. A
// nil hostCache (a cold trial) looks afresh.
type hostCache struct {
	mounts *mountTable
	masks  *maskCache
}

func newHostCache() *hostCache {
	return &hostCache{mounts: &mountTable{fd: -1}, masks: newMaskCache()}
}

func (hc *hostCache) close() {
	hc.mounts.close()
	hc.masks.close()
}

// sandbox is what a prepared guest was built for, apart from the command: a
// pooled sandbox serves only a trial whose spec asks for the same.
type sandbox struct {
	Mounts    []wire.MountSpec
	Masks     []string // resolved
	Hidden    []string // resolved: dryexec's own state
	Limits    dryexec.Limits
	UpperSize int64
	Net       []string // --net specs; never empty ("none")
	NetCADir  string   // resolved
	// Image: the image's layer dirs (lowest first) instead of the host's
	// mounts (Mounts is then just "/"); nil for a view of the host.
	Image []string
}

func sandboxFor(spec dryexec.TrialSpec, hc *hostCache) (sandbox, error) {
	sb, err := sandboxBase(spec)
	if err == nil {
		err = viewOf(spec, hc)(&sb)
	}
	return sb, err
}

// sandboxBase is the part of spec's sandbox that starting its guest needs:
// the limits, the network, an image's layers (an image's sandbox is whole
// here). The view of the host (viewOf) is resolved meanwhile, while the
// guest's runtime starts (Rung.prepare).
func sandboxBase(spec dryexec.TrialSpec) (sandbox, error) {
	if spec.Image != nil {
		return imageSandbox(spec)
	}
	// netsim's CA key signs what the sandbox trusts: it is masked whoever
	// asked for the trial, and made first, so that the mask exists (a path
	// is masked only if it exists when the masks are resolved, and the
	// overlay shows the host's later files).
	caDir, err := EnsureCA(spec.NetCADir)
	if err != nil {
		return sandbox{}, err
	}
	nets := spec.Net
	if len(nets) == 0 {
		nets = []string{"none"}
	}
	return sandbox{Limits: spec.Limits, UpperSize: spec.UpperSizeBytes, Net: nets, NetCADir: caDir}, nil
}

// viewOf returns what adds the view of the host to spec's sandbox made by
// sandboxBase: the mounts the overlays cover and the masks (with the
// host's mounts and masks from hc; nil looks afresh). The resolution reads
// the mount table and looks for every default mask (≈ 2 ms of a cold
// trial here), so a cold trial does it once its guest is starting.
func viewOf(spec dryexec.TrialSpec, hc *hostCache) func(*sandbox) error {
	return func(sb *sandbox) error {
		if spec.Image != nil {
			return nil // an image's view is its layers (sandboxBase)
		}
		var mt *mountTable
		var mc *maskCache
		if hc != nil {
			mt, mc = hc.mounts, hc.masks
		}
		mounts, gen, err := mt.get()
		if err != nil {
			return err
		}
		if uid := os.Getuid(); uid != 0 {
			mounts = ownedRoots(mounts, uid, spec.Action.Cwd)
		}
		cover, err := mc.resolve(append(slices.Clone(spec.Masks), sb.NetCADir), spec.NoDefaultMasks, spec.OwnPaths, gen)
		if err != nil {
			return err
		}
		sb.Mounts, sb.Masks, sb.Hidden = mounts, cover.Masks, cover.Hidden
		return nil
	}
}

func (a sandbox) equal(b sandbox) bool {
	return a.Limits == b.Limits && a.UpperSize == b.UpperSize && a.NetCADir == b.NetCADir &&
		slices.Equal(a.Net, b.Net) && slices.Equal(a.Masks, b.Masks) && slices.Equal(a.Hidden, b.Hidden) &&
		slices.Equal(a.Mounts, b.Mounts) && slices.Equal(a.Image, b.Image)
}

// checkAction checks a's form; for a view of the host also that its cwd is
// a host directory (an image's is checked in the image: checkImageCwd).
func checkAction(a dryexec.Action, image bool) error {
	bad := func(f string, args ...any) error {
		return fmt.Errorf("%w: %s", dryexec.ErrBadAction, fmt.Sprintf(f, args...))
	}
	if len(a.Argv) == 0 || a.Argv[0] == "" {
		return bad("empty argv")
	}
	if !strings.HasPrefix(a.Cwd, "/") {
		return bad("cwd %q is not absolute", a.Cwd)
	}
	if st, err := os.Stat(a.Cwd); !image && (err != nil || !st.IsDir()) {
		return bad("cwd %q is not a directory on the host", a.Cwd)
	}
	for k, v := range a.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return bad("env %q is not a valid variable", k)
		}
	}
	for _, s := range a.Argv {
		if strings.ContainsRune(s, 0) {
			return bad("NUL in argv")
		}
	}
	if a.TimeoutMS < 0 {
		return bad("negative timeout")
	}
	return nil
}

// StartGuest starts `dryexec guest ROLE` in fresh mount, pid, net, ipc, uts and
// cgroup namespaces (and a user namespace when not root), with files as its fds
// 3, 4, …; files[0] must be the guest's end of the wire stream.
func (r *Rung) StartGuest(role string, files []*os.File) (*exec.Cmd, error) {
	return r.StartGuestLimited(role, files, nil)
}

// StartGuestLimited is StartGuest with the guest (and so everything it
// starts) under lim, in place before it can run anything.
func (r *Rung) StartGuestLimited(role string, files []*os.File, lim *Limiter) (*exec.Cmd, error) {
	cmd, attached, err := r.startGuest(role, files, lim, nil)
	if err != nil {
		return nil, err
	}
	if err := <-attached; err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, err
	}
	return cmd, nil
}

// startGuest starts the guest and puts it under lim in the background:
// attached yields the outcome, which the caller must have before the guest
// runs anything of the sandbox's. Why: on a cgroup v1 host the attach waits
// for an RCU grace period (≈ 10 ms in a nested VM), and the guest can start
// its runtime and build the view meanwhile.
//
// born, when not nil, asks for the guest to be born in place instead
// (Limiter.spawnBorn), where the host can: no attach then, and *born holds
// the guest's fds of the files its launcher enters its groups through
// (wire.TrialStart.LauncherCgroups); nil where it could not.
func (r *Rung) startGuest(role string, files []*os.File, lim *Limiter, born *[]int) (*exec.Cmd, <-chan error, error) {
	exe := r.GuestExe
	if exe == "" {
		exe = guestexe.Executable()
	}
	uid, gid := os.Getuid(), os.Getgid()
	attr := &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID |
			syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWCGROUP,
		// The guest dies with us even if we are SIGKILLed; it also exits when the
		// control stream closes.
		Pdeathsig: syscall.SIGKILL,
	}
	if uid != 0 {
		// Rootless: the guest needs a user namespace to mount anything. As root
		// it does without one (a copied mount tree is then not locked, so one
		// overlay covers a whole host mount), and the command instead gets a
		// user namespace of its own (CommandUserNS): it keeps its identity and
		// file ownership, but its capabilities reach nothing.
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		// The guest must be root of its namespace: a non-root uid loses every
		// capability at execve. The command gets the caller's ids back in a
		// namespace of its own (CommandUID/GID).
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}}
		attr.GidMappingsEnableSetgroups = false
	}
	if lim != nil {
		lim.prepare(attr)
	}
	cmd := &exec.Cmd{
		Path:        exe,
		Args:        []string{"dryexec", "guest", role},
		Env:         []string{},
		ExtraFiles:  files,
		SysProcAttr: attr,
	}
	attached := make(chan error, 1)
	if born != nil {
		started, err := lim.spawnBorn(cmd, born)
		switch {
		case started && err != nil:
			cmd.Process.Kill()
			cmd.Wait()
			return nil, nil, err
		case started:
			attached <- nil
			return cmd, attached, nil
		case err != nil:
			return nil, nil, startError(err)
		}
		// The guest cannot be born in place (a v2 host, a thread that
		// could not move): it is started and attached as below, and its
		// launcher gets nothing to enter.
		*born = nil
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, startError(err)
	}
	if lim == nil {
		attached <- nil
	} else {
		go func() {
			r.hooks.beforeAttach()
			attached <- lim.attach(cmd.Process.Pid)
		}()
	}
	return cmd, attached, nil
}

// startError words a guest that could not be started.
func startError(err error) error {
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSPC) {
		return &dryexec.IsolationUnavailableError{Rung: Name, Missing: "cannot create namespaces: " + err.Error()}
	}
	return fmt.Errorf("starting guest: %w", err)
}

// Mounts plans the host mounts a guest must overlay.
func Mounts() ([]wire.MountSpec, error) {
	infos, err := mountinfo.GetMounts(nil)
	if err != nil {
		return nil, fmt.Errorf("reading mountinfo: %w", err)
	}
	mounts := planMounts(infos)
	if mounts == nil {
		return nil, &dryexec.IsolationUnavailableError{Rung: Name, Missing: "no overlayable root filesystem in mountinfo"}
	}
	return mounts, nil
}

// trial is one running guest and the host ends of its descriptors. prepare
// makes it ready (the view built, the guest waiting for its command); trial
// runs one command in it; cleanup ends it. It is never used twice.
type trial struct {
	r      *Rung
	sb     sandbox
	id     string // names its cgroup
	spec   dryexec.TrialSpec
	cmd    *exec.Cmd
	conn   *wire.Conn
	ctrl   *os.File
	outR   *os.File // the command's stdout and stderr, read by the copiers
	errR   *os.File
	stdinW *os.File // the command's stdin; closed at once when it has none
	stubW  *os.File // the command stub's request pipe (wire.StubFD): the command goes there
	out    *tail.Buffer
	errb   *tail.Buffer
	pipes  sync.WaitGroup // the stdout/stderr copiers
	lim    *Limiter       // the trial's cgroup (or rlimits); removed by cleanup
	watch  *MaskWatch     // the masks, pinned once the view is built
	uppers []fsdelta.Mount
	// imageView is the host's read-only merged view of the image (a
	// detached overlay of its layers) for a trial on an image: the Differ
	// compares the upper with it. Nil for a view of the host.
	imageView *os.File
	// scratch is the host's own handle (O_PATH) on the guest's scratch
	// tmpfs, taken before the command starts: if the guest dies or breaks
	// the protocol mid-trial, the host walks the upper dirs through it
	// (salvage). Nil, with scratchErr saying why, if it could not be taken.
	scratch    *os.File
	scratchErr string
	// sent: the command went to the stub (from then on the trial always
	// ends with a delta, complete or not); sentAt is when, on wire.MonoNow's
	// clock. exit is the guest's trial.exit once read, and seen what the
	// containment saw then.
	sent        bool
	sentAt      int64
	streamEnded bool // the guest's stream broke or ended mid-report
	overdue     bool // the host killed the guest for not reporting in time
	exit        *wire.TrialExit
	seen        dryexec.StateDelta
	net         *trialNet // the trial's netsim (nil fields: loopback only)
	netFD       int       // the guest's end of the TUN hand-over socket
	// attached yields whether the guest is under lim (startGuest): read
	// through joined, by ready before the sandbox is ready and by cleanup
	// before the group goes (a ready that failed early never waited).
	attached  <-chan error
	attachErr error
	// stubReady is closed once the guest's trial.ready has been read (its
	// command stub started and waiting), stubErr saying instead what came;
	// nil unless a pool reads it ahead (awaitStub): converse reads it
	// first otherwise.
	stubReady chan struct{}
	stubErr   error
	// guestFD is a pidfd of a pooled sandbox's guest (watchGuest), -1 for
	// none: alive polls it.
	guestFD int
	pooled  bool // made ahead, for a pool (wire.TrialStart.Pooled)
	// born holds the guest's fds of its launcher's cgroup files when the
	// guest was born in place (startGuest); nil otherwise.
	born []int
}

// prepare starts a guest for sb and waits until its sandbox is built and
// confined, ready for a command, its netsim serving. id names the trial's
// cgroup and seeds its mocks.
//
// view, when not nil, completes sb (sandboxBase's) with the view of the
// host once the guest has been started: the guest's runtime starts
// meanwhile, and needs the view only in trial.start. pooled says the
// sandbox will wait in a pool for its trial (wire.TrialStart.Pooled).
func (r *Rung) prepare(ctx context.Context, sb sandbox, id string, view func(*sandbox) error, pooled bool) (*trial, error) {
	// netsim's role starts beside the guest (startTrialNet): both are
	// process starts, and the guest's is the one the trial waits for.
	nt, err := startTrialNet(dryexec.TrialSpec{TrialID: id, Net: sb.Net, NetCADir: sb.NetCADir})
	if err != nil {
		return nil, err
	}
	t, err := r.start(sb, id, nt)
	if err != nil {
		nt.close()
		return nil, err
	}
	t.pooled = pooled
	if view != nil {
		if err := view(&t.sb); err != nil {
			t.cleanup()
			return nil, err
		}
	}
	if err := nt.started(); err != nil {
		t.cleanup()
		return nil, err
	}
	nt.serve(ctx)
	if err := t.ready(); err != nil {
		t.cleanup()
		return nil, err
	}
	// netsim started beside the guest and made itself ready meanwhile.
	if err := nt.ready(ctx); err != nil {
		t.cleanup()
		return nil, err
	}
	return t, nil
}

func (r *Rung) start(sb sandbox, id string, nt *trialNet) (*trial, error) {
	t := &trial{r: r, sb: sb, id: id, net: nt, guestFD: -1}
	if sb.Image != nil {
		v, err := imageView(sb.Image)
		if err != nil {
			return nil, err
		}
		t.imageView = v
		defer func() {
			if t.cmd == nil {
				v.Close()
			}
		}()
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	// Non-blocking, so that the runtime poller owns our end and Close
	// interrupts a Read in progress.
	unix.SetNonblock(fds[0], true)
	t.ctrl = os.NewFile(uintptr(fds[0]), "ctrl")
	guestCtrl := os.NewFile(uintptr(fds[1]), "guest-ctrl")
	defer guestCtrl.Close()
	// The guest's ends: closed here once it has them.
	var ends []*os.File
	defer func() {
		for _, f := range ends {
			f.Close()
		}
	}()
	pipe := func() (r, w *os.File) {
		if err != nil {
			return nil, nil
		}
		r, w, err = os.Pipe()
		return r, w
	}
	var outW, errW, stdinR *os.File
	t.outR, outW = pipe()
	t.errR, errW = pipe()
	// Always a stdin pipe: the command is not known yet.
	stdinR, t.stdinW = pipe()
	stubR, stubW := pipe()
	t.stubW = stubW
	ends = append(ends, outW, errW, stdinR, stubR)
	if err == nil {
		extra := []*os.File{guestCtrl, outW, errW, stdinR, stubR}
		if nt != nil && nt.guest != nil {
			t.netFD = 3 + len(extra)
			extra = append(extra, nt.guest)
		}
		if t.lim, err = r.NewLimiter(id, sb.Limits); err == nil {
			t.cmd, t.attached, err = r.startGuest(wire.RoleNSTrial, extra, t.lim, &t.born)
		}
	}
	if err != nil {
		t.lim.Close()
		for _, f := range []*os.File{t.ctrl, t.outR, t.errR, t.stdinW, t.stubW} {
			if f != nil {
				f.Close()
			}
		}
		return nil, err
	}
	r.trace("start")
	r.hooks.started(t.cmd.Process.Pid)
	t.conn = wire.NewConn(t.ctrl)
	return t, nil
}

// ready speaks the first half of the trial protocol: the guest's hello,
// trial.start, and its trial.mounts once the view is built. The masks are
// pinned and the guest's own threads leave the pids limit (its launcher
// thread, which starts the command, stays in it).
func (t *trial) ready() error {
	// trial.start goes out before the hello is read: the guest sends its
	// hello first and then reads, so the request waits in the stream for it
	// and the guest builds the view as soon as its runtime is up, without a
	// round trip through this process (one scheduling of it, which a
	// loaded host makes slow). The hello is still checked before anything
	// of the guest's is trusted; a guest of another protocol that read the
	// request is killed with its namespaces.
	host, _ := os.Hostname()
	start := wire.TrialStart{
		Mounts: t.sb.Mounts, Image: t.sb.Image, Hostname: host, UpperSize: t.sb.UpperSize,
		Rootless: os.Getuid() != 0, CommandUserNS: true, CommandUID: os.Getuid(), CommandGID: os.Getgid(),
		Masks: t.sb.Masks, Hidden: t.sb.Hidden, CommandNPROC: t.lim.CommandNPROC(), Pooled: t.pooled,
	}
	start.LauncherCgroups = t.born
	t.net.startNS(&start, t.netFD)
	sendErr := t.conn.Send(wire.KindReq, wire.VerbTrialStart, 1, &start, wire.Attachments(start.TrustBundle)...)
	f, err := t.conn.Read()
	if err != nil {
		return t.guestErr("reading hello", err)
	}
	var hello wire.Hello
	if f.Kind != wire.KindHello || f.Decode(&hello) != nil {
		return fmt.Errorf("%w: bad hello from guest", dryexec.ErrGuest)
	}
	if hello.Version != wire.Version {
		return fmt.Errorf("%w: the guest %s speaks protocol %d, this dryexec %d (a dryexec-guest from another build?)",
			dryexec.ErrGuest, t.cmd.Path, hello.Version, wire.Version)
	}
	t.r.trace("hello")
	if sendErr != nil {
		return t.guestErr("sending trial.start", sendErr)
	}
	if f, err = t.expect(wire.VerbTrialMounts); err != nil {
		return err
	}
	var tm wire.TrialMounts
	if err := f.Decode(&tm); err != nil {
		return t.guestErr("decoding trial.mounts", err)
	}
	if t.uppers, err = t.checkUppers(tm.Paths); err != nil {
		return err
	}
	t.scratch, t.scratchErr = openScratch(t.cmd.Process.Pid, tm.ScratchFD)
	t.watch = NewMaskWatch()
	if err := t.watch.Pin(t.cmd.Process.Pid, t.sb.Masks); err != nil {
		return err
	}
	// The guest ran nothing of the sandbox's yet: the command comes with
	// trial.run, after this.
	if err := t.joined(); err != nil {
		return err
	}
	// A guest born in place has its threads sheltered already, and its
	// launcher enters the limits itself.
	if t.born == nil {
		if err := t.lim.ShelterSupervisor(t.cmd.Process.Pid); err != nil {
			return err
		}
	}
	// Joined, the guest may start the command's process (guest.cmdStub):
	// in a pool that is done ahead of the trial.
	if err := t.conn.Send(wire.KindReq, wire.VerbTrialJoined, 0, nil); err != nil {
		return t.guestErr("sending trial.joined", err)
	}
	t.r.trace("view")
	return nil
}

// trial runs spec's command in the prepared sandbox t. The caller ends t
// with cleanup afterwards.
func (t *trial) trial(ctx context.Context, spec dryexec.TrialSpec) (*dryexec.StateDelta, error) {
	t.spec = spec
	t.out, t.errb = tail.New(spec.OutputCap), tail.New(spec.OutputCap)
	if err := t.checkImageCwd(spec.Action.Cwd); err != nil {
		return nil, err
	}
	d, err := t.run(ctx)
	if d != nil && spec.Image != nil {
		d.Image = &dryexec.DeltaImage{Ref: spec.Image.Ref, Digest: spec.Image.Digest, Workspace: spec.Action.Cwd}
	}
	t.net.finish(d)
	if d != nil && spec.Exchanges != nil && t.net.sim != nil {
		if recs := t.net.sim.Records(); len(recs) > 0 {
			b, jerr := json.Marshal(recs)
			if jerr == nil {
				jerr = spec.Exchanges.PutExchanges(b)
			}
			if jerr != nil {
				d.Warnings = append(d.Warnings, "the network exchanges' bodies were not kept: "+jerr.Error())
			}
		}
	}
	t.r.trace("net")
	return d, err
}

// startIO starts copying the command's output into the delta's buffers
// (and the caller's live writers) and its stdin from the caller. It runs
// once the command is on its way: each goroutine start wakes a thread,
// which the command need not wait for (a pipe holds 64 KiB meanwhile).
func (t *trial) startIO() {
	spec := t.spec
	t.pipes.Add(2)
	go t.copy(t.out.Tee(spec.Stdout), t.outR)
	go t.copy(t.errb.Tee(spec.Stderr), t.errR)
	t.outR, t.errR = nil, nil
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

func (t *trial) copy(dst io.Writer, src *os.File) {
	defer t.pipes.Done()
	defer src.Close()
	io.Copy(dst, src)
}

// expect reads the guest's next frame, which must be verb (else a guest
// error: its own KindErr, or the protocol broken). A stream that breaks
// sets streamEnded (salvage waits for such a guest's exit).
func (t *trial) expect(verb string) (*wire.Frame, error) {
	f, err := t.conn.Read()
	if err != nil {
		t.streamEnded = true
		return nil, t.guestErr("reading "+verb, err)
	}
	if f.Kind == wire.KindErr {
		var re wire.RemoteError
		f.Decode(&re)
		return nil, fmt.Errorf("%w: %w", dryexec.ErrGuest, &re)
	}
	if f.Verb != verb {
		return nil, fmt.Errorf("%w: unexpected %s %q before %s", dryexec.ErrGuest, f.Kind, f.Verb, verb)
	}
	return f, nil
}

// awaitStub reads trial.ready in the background, for a pooled sandbox: its
// stub starts while the sandbox waits in the pool, and the pool counts it
// settled once the guest has said so (settled). converse takes the outcome.
func (t *trial) awaitStub() {
	t.stubReady = make(chan struct{})
	go func() {
		defer close(t.stubReady)
		_, t.stubErr = t.expect(wire.VerbTrialReady)
	}()
}

// settled says a pooled sandbox's command stub is started and waiting.
func (t *trial) settled() bool {
	select {
	case <-t.stubReady:
		return t.stubErr == nil
	default:
		return false
	}
}

// watchGuest opens a pidfd of a pooled sandbox's guest, which becomes
// readable when the guest dies (alive). Without one (a kernel before 5.3)
// only a guest that dies before its stub is settled is seen.
func (t *trial) watchGuest() {
	if fd, err := unix.PidfdOpen(t.cmd.Process.Pid, 0); err == nil {
		t.guestFD = fd
	}
}

// alive says a pooled sandbox can still serve a trial: its guest has not
// died while it waited (killed, the OOM killer) nor said anything but
// trial.ready. The pool passes over a dead one and replaces it: handed
// out, it failed the trial it was given ("sending the command: broken
// pipe").
func (t *trial) alive() bool {
	if t.stubReady != nil {
		select {
		case <-t.stubReady:
			if t.stubErr != nil {
				return false
			}
		default:
		}
	}
	if t.guestFD >= 0 {
		fds := []unix.PollFd{{Fd: int32(t.guestFD), Events: unix.POLLIN}}
		if n, _ := unix.Poll(fds, 0); n > 0 {
			return false
		}
	}
	return true
}

// stubStarted waits for trial.ready, read ahead (awaitStub) or now.
func (t *trial) stubStarted() error {
	if t.stubReady == nil {
		_, err := t.expect(wire.VerbTrialReady) // the first frame after trial.joined
		return err
	}
	<-t.stubReady
	return t.stubErr
}

// joined waits for the guest's join of the trial's group and returns its
// outcome; it may be called any number of times.
func (t *trial) joined() error {
	if t.attached != nil {
		t.attachErr = <-t.attached
		t.attached = nil
	}
	return t.attachErr
}

// cleanup makes sure the guest (and so the whole pid namespace) and its
// netsim are gone; it ends a used sandbox and one that never ran a command.
func (t *trial) cleanup() {
	t.ctrl.Close()
	t.cmd.Process.Kill()
	t.cmd.Wait()
	if t.stubReady != nil {
		<-t.stubReady // its read ended with the guest
	}
	if t.guestFD >= 0 {
		unix.Close(t.guestFD)
		t.guestFD = -1
	}
	t.r.trace("reaped")
	for _, f := range []*os.File{t.outR, t.errR, t.stdinW, t.stubW} {
		if f != nil {
			f.Close()
		}
	}
	t.pipes.Wait()
	t.net.close()
	t.watch.Close()
	if t.imageView != nil {
		t.imageView.Close()
	}
	if t.scratch != nil {
		// The last reference: the scratch tmpfs (up to the trial's write
		// budget) is freed now.
		t.scratch.Close()
	}
	t.joined() // the join may still be in flight; the group goes next
	if err := t.lim.Close(); err != nil && t.r.Log != nil {
		t.r.Log.Warn("removing the trial's cgroup", "cgroup", t.id, "err", err)
	}
	t.r.trace("cleaned")
}

func (t *trial) run(ctx context.Context) (*dryexec.StateDelta, error) {
	a := t.spec.Action
	outer := ctx
	if a.TimeoutMS > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, a.Timeout()+t.r.walkGrace(), errOverdue)
		defer cancel()
	}
	// Cancelling ctx kills the guest, which breaks the stream read below.
	stop := context.AfterFunc(ctx, func() { t.cmd.Process.Kill() })
	defer stop()

	d, err := t.converse()
	if err != nil {
		overdue := errors.Is(context.Cause(ctx), errOverdue)
		if ctx.Err() != nil && !overdue {
			// The caller gave up on the trial: it wants no delta.
			return nil, fmt.Errorf("trial %s: %w", t.spec.TrialID, ctx.Err())
		}
		if se := (*fsdelta.StoreError)(nil); !t.sent || errors.As(err, &se) {
			// Nothing ran, or the host itself failed (its blob store).
			return nil, err
		}
		if overdue {
			t.overdue = true
			err = fmt.Errorf("%w: no report within the command's timeout and %v more", dryexec.ErrGuest, t.r.walkGrace())
		}
		// The command ran, and the guest cannot say what it did: the host
		// says what it can see itself. The command must not be able to
		// choose "no delta" by breaking its supervisor.
		return t.salvage(outer, err)
	}
	t.pipes.Wait()
	t.r.trace("pipes")
	out, otr := t.out.Bytes()
	errb, etr := t.errb.Bytes()
	d.Process.Stdout, d.Process.StdoutTruncated = string(out), otr
	d.Process.Stderr, d.Process.StderrTruncated = string(errb), etr
	return d, nil
}

// converse sends the command and builds the delta from the guest's report.
func (t *trial) converse() (*dryexec.StateDelta, error) {
	a := t.spec.Action
	env := make([]string, 0, len(a.Env))
	for k, v := range a.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	run := wire.TrialRun{Argv: a.Argv, Env: t.net.trustEnv(env), Cwd: a.Cwd, TimeoutMS: a.TimeoutMS,
		Stdin: t.spec.Stdin != nil}
	// The command goes to the stub first, straight from here: it starts
	// without waiting for the guest to be scheduled. trial.run follows
	// (the guest needs the timeout; argv and cwd for its messages).
	req, err := wire.StubRequest(&run)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", dryexec.ErrBadAction, err)
	}
	// What the report is read into is made before the command is sent:
	// the stub, woken on this CPU, runs once this thread blocks on the
	// guest's report, and every step between the two delays the command.
	differ := fsdelta.NewDiffer(t.uppers, t.spec.Blobs, t.spec.DiffMaxBytes)
	defer differ.Close()
	if t.spec.SpillDir != "" {
		differ.SpillTo(t.spec.SpillDir, 0)
	}
	differ.SetHidden(t.hiddenHostPaths())
	if os.Getuid() != 0 {
		// The guest sees the ids of its own user namespace (what the
		// command made shows as 0 there): the caller owns what it wrote.
		differ.SetOwner(os.Getuid(), os.Getgid())
	}
	d := &dryexec.StateDelta{TrialID: t.spec.TrialID, Rung: Name, Action: a}
	run.StartMonoNS = wire.MonoNow()
	started := time.Now()
	var deadline time.Time // for collecting the content, set at trial.exit
	_, err = t.stubW.Write(req)
	t.stubW.Close()
	t.stubW = nil
	if err != nil {
		return nil, t.guestErr("sending the command", err)
	}
	t.sent, t.sentAt = true, run.StartMonoNS
	t.startIO()
	run.Env = nil
	sendRun := func() error {
		if err := t.conn.Send(wire.KindReq, wire.VerbTrialRun, 2, &run); err != nil {
			return t.guestErr("sending trial.run", err)
		}
		return nil
	}
	if !t.r.hooks.runAfterExit() {
		if err := sendRun(); err != nil {
			return nil, err
		}
	}
	if err := t.stubStarted(); err != nil {
		return nil, err
	}
	// What the containment saw is read at trial.exit, while the guest walks
	// (both are fractions of a millisecond, in different processes: what the
	// guest sends meanwhile waits in the socket), and merged at the end.
	for {
		f, err := t.conn.Read()
		if err != nil {
			t.streamEnded = true
			return nil, t.guestErr("reading report", err)
		}
		if f.Kind == wire.KindErr {
			var re wire.RemoteError
			f.Decode(&re)
			return nil, fmt.Errorf("%w: %w", dryexec.ErrGuest, &re)
		}
		switch f.Verb {
		case wire.VerbTrialExit:
			if t.exit != nil {
				return nil, fmt.Errorf("%w: trial.exit twice", dryexec.ErrGuest)
			}
			exit := new(wire.TrialExit)
			if err := f.Decode(exit); err != nil {
				return nil, t.guestErr("decoding trial.exit", err)
			}
			if exit.DurationNS == 0 && exit.EndMonoNS > 0 {
				// The guest reported the end before it had read
				// trial.run: the command started when this process
				// wrote it (the clock is shared), and ended no later
				// than now.
				exit.DurationNS = min(max(exit.EndMonoNS-t.sentAt, 0), wire.MonoNow()-t.sentAt)
			}
			t.exit = exit
			if t.r.hooks.runAfterExit() {
				if err := sendRun(); err != nil {
					return nil, err
				}
			}
			t.r.trace("exit")
			deadline = t.r.collectDeadline(a, started, time.Now())
			differ.SetDeadline(deadline)
			// Everything the command started is dead; the guest lives on
			// (walking), so its view and group can still be read, and
			// netsim has seen the last packet it will get. netsim is
			// stopped once the walk proves long (its first entry) or is
			// over: its teardown takes a CPU, and with 2 of them, stopping
			// it here made the guest's short walk wait for one (≈ 0.07 ms
			// of a warm /bin/true).
			t.contained(&t.seen)
		case wire.VerbFSEntry:
			if t.exit == nil {
				return nil, fmt.Errorf("%w: fs.entry before trial.exit", dryexec.ErrGuest)
			}
			t.net.stop()
			if err := t.addEntry(t.conn, differ, f); err != nil {
				return nil, err
			}
		case wire.VerbTrialDone:
			exit := t.exit
			if exit == nil {
				return nil, fmt.Errorf("%w: trial.done before trial.exit", dryexec.ErrGuest)
			}
			t.net.stop()
			var done wire.TrialDone
			if err := f.Decode(&done); err != nil {
				return nil, t.guestErr("decoding trial.done", err)
			}
			if err := differ.FinishDelta(d); err != nil {
				return nil, err
			}
			d.Violations = append(d.Violations, t.seen.Violations...)
			d.Warnings = append(d.Warnings, t.seen.Warnings...)
			d.Memory.PeakRSSBytes = t.seen.Memory.PeakRSSBytes
			t.fillProcess(d, exit, &done)
			d.Memory.Method = "none"
			fillContainment(d, exit)
			if d.Memory.PeakRSSBytes == 0 {
				d.Memory.PeakRSSBytes = done.MaxRSS
			} else {
				d.Process.PeakRSSBytes = d.Memory.PeakRSSBytes
			}
			if why := differ.CrossedReason(); why != "" {
				d.Incomplete = true
				d.IncompleteReason = joinReasons(d.IncompleteReason, why)
			}
			if differ.Expired() {
				d.Incomplete = true
				d.IncompleteReason = joinReasons(d.IncompleteReason, fmt.Sprintf("the trial ran out of time to collect what it wrote (%s after the command's start): "+
					"files past it are listed with their size, without their content", deadline.Sub(started).Round(time.Millisecond)))
			}
			d.Normalize()
			d.ComputeTotals()
			t.r.trace("done")
			return d, nil
		default:
			return nil, fmt.Errorf("%w: unexpected %s %q", dryexec.ErrGuest, f.Kind, f.Verb)
		}
	}
}

// addEntry feeds one fs.entry frame f (and, for a file, the fs.data frames
// that follow it on conn) to differ: a guest's report and the host's own
// walk (salvage) pass the same checks.
func (t *trial) addEntry(conn *wire.Conn, differ *fsdelta.Differ, f *wire.Frame) error {
	var e wire.FSEntry
	if err := f.Decode(&e); err != nil {
		return t.guestErr("decoding fs.entry", err)
	}
	var content io.Reader
	if e.Kind == wire.EntryFile {
		content = &dataReader{conn: conn, left: e.Size}
	}
	if err := differ.Add(&e, content); err != nil {
		if se := (*fsdelta.StoreError)(nil); errors.As(err, &se) {
			return fmt.Errorf("trial %s: %w", t.spec.TrialID, err)
		}
		return fmt.Errorf("%w: %w", dryexec.ErrGuest, err)
	}
	if dr, ok := content.(*dataReader); ok && dr.left != 0 {
		return fmt.Errorf("%w: short content for %q", dryexec.ErrGuest, e.Path)
	}
	return nil
}

// checkUppers validates the guest's list of upper dirs: each must be a clean
// absolute path within a mount the host asked it to overlay.
func (t *trial) checkUppers(paths []string) ([]fsdelta.Mount, error) {
	if len(paths) == 0 || len(paths) > maxUppers {
		return nil, fmt.Errorf("%w: %d upper dirs", dryexec.ErrGuest, len(paths))
	}
	planned := make([]string, len(t.sb.Mounts))
	for i, m := range t.sb.Mounts {
		planned[i] = m.Path
	}
	dm := make([]fsdelta.Mount, len(paths))
	for i, p := range paths {
		if !strings.HasPrefix(p, "/") || path.Clean(p) != p || !under(p, planned) {
			return nil, fmt.Errorf("%w: upper dir for %q is outside the planned mounts", dryexec.ErrGuest, p)
		}
		dm[i] = fsdelta.Mount{Path: p, Root: t.imageView}
	}
	return dm, nil
}

// maxUppers bounds the guest's upper dirs: one per mount, more only where a
// rootless lower had to be split directory by directory.
const maxUppers = 4096

func (t *trial) fillProcess(d *dryexec.StateDelta, ex *wire.TrialExit, done *wire.TrialDone) {
	p := &d.Process
	p.ExitCode, p.Signal, p.TimedOut = ex.ExitCode, ex.Signal, ex.TimedOut
	p.DurationNS, p.CPUUserNS, p.CPUSysNS, p.PeakRSSBytes = ex.DurationNS, done.CPUUserNS, done.CPUSysNS, done.MaxRSS
	if ex.StartError != "" {
		t.errb.Write([]byte("dryexec: " + ex.StartError + "\n"))
	}
	if ex.UpperFull {
		d.Violations = append(d.Violations, dryexec.Violation{Kind: "limit",
			Detail: fmt.Sprintf("upper storage full: the trial may write at most %d bytes (--upper-size)", t.spec.UpperSizeBytes)})
	}
}

func (t *trial) guestErr(doing string, err error) error {
	return fmt.Errorf("%w: %s: %w", dryexec.ErrGuest, doing, err)
}

// dataReader reads a file's content from the fs.data and fs.hole frames that
// follow its entry. A hole reads as zeros, made here: the stream carries only
// its length.
type dataReader struct {
	conn *wire.Conn
	left int64
	cur  []byte
	hole int64 // zeros still to read of the current hole
}

func (r *dataReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	for len(r.cur) == 0 && r.hole == 0 {
		if err := r.next(); err != nil {
			return 0, err
		}
	}
	if r.hole > 0 {
		n := int(min(int64(len(p)), r.hole))
		clear(p[:n])
		r.hole -= int64(n)
		r.left -= int64(n)
		return n, nil
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	r.left -= int64(n)
	return n, nil
}

// next reads the next frame of the content into cur or hole.
func (r *dataReader) next() error {
	f, err := r.conn.Read()
	if err != nil {
		return err
	}
	switch {
	case f.Verb == wire.VerbFSData && len(f.Bin) == 1 && len(f.Bin[0]) > 0:
		if int64(len(f.Bin[0])) > r.left {
			return fmt.Errorf("%w: more content than announced", wire.ErrProtocol)
		}
		r.cur = f.Bin[0]
	case f.Verb == wire.VerbFSHole && len(f.Bin) == 0:
		var h wire.FSHole
		if err := f.Decode(&h); err != nil {
			return err
		}
		if h.N <= 0 || h.N > r.left {
			return fmt.Errorf("%w: a hole of %d bytes with %d left", wire.ErrProtocol, h.N, r.left)
		}
		r.hole = h.N
	default:
		return fmt.Errorf("%w: expected fs.data, got %s %q", wire.ErrProtocol, f.Kind, f.Verb)
	}
	return nil
}

// Discard skips the rest of the content (fsdelta.Discarder): data frames are
// dropped, holes skipped without making their zeros.
func (r *dataReader) Discard() error {
	for {
		r.left -= int64(len(r.cur)) + r.hole
		r.cur, r.hole = nil, 0
		if r.left == 0 {
			return nil
		}
		if err := r.next(); err != nil {
			return err
		}
	}
}

// hiddenHostPaths are the host paths this trial's sandbox saw masked or
// hidden, which the Differ must never read (fsdelta.Differ.SetHidden).
func (t *trial) hiddenHostPaths() []string {
	return append(slices.Clone(t.sb.Masks), t.sb.Hidden...)
}

// joinReasons appends reason to an earlier one, if any.
func joinReasons(earlier, reason string) string {
	if earlier == "" {
		return reason
	}
	return earlier + "; " + reason
}
