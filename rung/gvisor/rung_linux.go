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
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/cgroup"
	"github.com/dryexec/dryexec/fsdelta"
	"github.com/dryexec/dryexec/internal/bootstamp"
	"github.com/dryexec/dryexec/internal/guestexe"
	"github.com/dryexec/dryexec/internal/tail"
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
	if err := linuxns.CheckAction(spec.Action); err != nil {
		return nil, err
	}
	if spec.TrialID == "" {
		spec.TrialID = dryexec.NewTrialID()
	}
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
	caDir, err := linuxns.EnsureCA(spec.NetCADir)
	if err != nil {
		return nil, err
	}
	cover, err := linuxns.ResolveCover(append(slices.Clone(spec.Masks), caDir), spec.NoDefaultMasks, spec.OwnPaths)
	if err != nil {
		return nil, err
	}
	// The same netsim as an ns trial's, serving a TUN device in the view
	// guest's network namespace, which runsc hands to gVisor's netstack.
	nw, err := linuxns.NewNet(ctx, spec.Net, caDir, spec.TrialID)
	if err != nil {
		return nil, err
	}
	defer nw.Close()
	t := &trial{r: r, spec: spec, runsc: runsc, mounts: mounts, cover: cover, scratchFD: -1, net: nw}
	defer t.cleanup()
	if err := t.start(); err != nil {
		return nil, err
	}
	return t.run(ctx)
}

// trial is one sandbox: the view guest (which becomes runsc), the host ends
// of its descriptors, and what the host keeps of it.
type trial struct {
	r      *Rung
	spec   dryexec.TrialSpec
	runsc  string
	mounts []wire.MountSpec
	cover  linuxns.Cover

	cmd       *exec.Cmd // the view guest, then runsc
	waited    chan struct{}
	waitErr   error
	view      *wire.Conn // the view guest's stream (until it execs runsc)
	viewCtrl  *os.File
	inner     *wire.Conn // the trial guest's, inside gVisor
	innerCtrl *os.File
	outR      *os.File
	errR      *os.File
	stdinW    *os.File
	stubW     *os.File
	runscErr  tailWriter // runsc's own error output
	runscErrR *os.File
	out, errb *tail.Buffer
	pipes     sync.WaitGroup

	net      *linuxns.Net
	trustEnv []string // netsim's trust variables for the command

	group     *cgroup.Group // nil: no cgroup here (a warning says so)
	before    cgroup.Stats
	limitHits []dryexec.Violation // the group's, once the sandbox is gone
	warnings  []string
	watch     *linuxns.MaskWatch

	uppers    []fsdelta.Mount
	scratch   *os.File // the host's handle on the scratch tmpfs (upper dirs)
	scratchFD int

	sent    bool
	sentAt  time.Time
	expired bool   // the walk ran out of time to keep content
	crossed string // why the walk refused to look into masked or hidden paths ("": it did not)
	// upperFull: the scratch tmpfs (the write budget) was full at the
	// command's end or after the sandbox's.
	upperFull bool
	exit      *wire.TrialExit
	done      *wire.TrialDone
}

// Descriptors of the view guest: wire.CtrlFD is its own stream; the trial
// guest's descriptors follow, and runsc passes each into the sandbox at the
// number the ns guest has it (--pass-fd).
const (
	viewStdoutFD = 4
	viewStderrFD = 5
	viewStdinFD  = 6
	viewStubFD   = 7
	viewInnerFD  = 8
	viewNetFD    = 9 // the TUN hand-over socket, when the sandbox has netsim
)

// start starts the view guest in a mount namespace of its own, in the
// trial's cgroup, with every descriptor the sandbox will need.
func (t *trial) start() error {
	pair := func(name string) (*os.File, *os.File, error) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, nil, fmt.Errorf("socketpair: %w", err)
		}
		// Non-blocking: the runtime poller owns our end, and Close
		// interrupts a Read in progress.
		unix.SetNonblock(fds[0], true)
		return os.NewFile(uintptr(fds[0]), name), os.NewFile(uintptr(fds[1]), name+"-guest"), nil
	}
	var ends []*os.File
	defer func() {
		for _, f := range ends {
			f.Close()
		}
	}()
	var err error
	var viewEnd, innerEnd, outW, errW, stdinR, stubR, runscErrW *os.File
	if t.viewCtrl, viewEnd, err = pair("view"); err != nil {
		return err
	}
	ends = append(ends, viewEnd)
	if t.innerCtrl, innerEnd, err = pair("inner"); err != nil {
		return err
	}
	ends = append(ends, innerEnd)
	for _, p := range []struct{ r, w **os.File }{{&t.outR, &outW}, {&t.errR, &errW}, {&stdinR, &t.stdinW}, {&stubR, &t.stubW}, {&t.runscErrR, &runscErrW}} {
		if *p.r, *p.w, err = os.Pipe(); err != nil {
			return err
		}
	}
	ends = append(ends, outW, errW, stdinR, stubR, runscErrW)

	name := "gv-" + t.spec.TrialID
	if m, merr := cgroup.NewManager(t.r.Cgroups); merr != nil {
		err = merr
	} else {
		t.group, t.warnings, err = m.New(name, t.hostLimits())
	}
	switch {
	case errors.Is(err, cgroup.ErrUnavailable):
		t.group = nil
		t.warnings = append(t.warnings, fmt.Sprintf("%v: the sandbox's memory and CPU are not limited", err))
	case err != nil:
		return err
	}
	if t.group != nil {
		t.before = t.group.Stats()
	}

	exe := t.r.GuestExe
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
	extra := []*os.File{viewEnd, outW, errW, stdinR, stubR, innerEnd}
	if g := t.net.GuestFile(); g != nil {
		extra = append(extra, g)
	}
	if t.group != nil && t.group.CgroupFD() >= 0 {
		attr.UseCgroupFD, attr.CgroupFD = true, t.group.CgroupFD()
	}
	t.cmd = &exec.Cmd{
		Path:        exe,
		Args:        []string{"dryexec", "guest", wire.RoleGVisorView},
		Env:         []string{},
		ExtraFiles:  extra,
		Stderr:      runscErrW,
		SysProcAttr: attr,
	}
	if err := t.cmd.Start(); err != nil {
		return fmt.Errorf("starting the gvisor view guest: %w", err)
	}
	t.waited = make(chan struct{})
	go func() {
		t.waitErr = t.cmd.Wait()
		close(t.waited)
	}()
	runscErrR := t.runscErrR
	t.runscErrR = nil
	t.pipes.Go(func() { copyOut(&t.runscErr, runscErrR) })
	if t.group != nil {
		// v1 groups (on a hybrid host, the v2 fd above holds no memory or
		// pids controller) are joined by pid, before runsc starts.
		if err := t.group.Attach(t.cmd.Process.Pid); err != nil {
			return fmt.Errorf("putting the gvisor sandbox in its cgroup: %w", err)
		}
	}
	t.net.Serve(context.Background())
	t.view = wire.NewConn(t.viewCtrl)
	t.inner = wire.NewConn(t.innerCtrl)
	return nil
}

// hostLimits are the limits of the cgroup that holds runsc and its
// sandbox: the trial's memory and CPU; the pids limit bounds gVisor's
// own threads and helper processes (a sandbox's processes are not host
// processes), so it is the trial's with room for those.
func (t *trial) hostLimits() dryexec.Limits {
	l := t.spec.Limits
	if l.Pids >= 0 {
		l.Pids = cmp.Or(l.Pids, dryexec.DefaultPids) + runscThreads
	}
	return l
}

// commandNPROC is the command's RLIMIT_NPROC inside gVisor: the trial's
// pids limit (its default when 0; none when negative).
func commandNPROC(l dryexec.Limits) int64 {
	switch {
	case l.Pids < 0:
		return 0
	case l.Pids == 0:
		return dryexec.DefaultPids
	}
	return l.Pids
}

// runscThreads is room in the host's pids limit for runsc, its gofer and
// its sentry's threads.
const runscThreads = 512

// cleanup ends the sandbox (if it still runs) and frees everything.
func (t *trial) cleanup() {
	for _, f := range []*os.File{t.viewCtrl, t.innerCtrl, t.stdinW, t.stubW} {
		if f != nil {
			f.Close()
		}
	}
	if t.cmd != nil && t.cmd.Process != nil {
		t.cmd.Process.Kill()
		<-t.waited
	}
	if t.group != nil {
		// Kills what runsc left (its sandbox and gofer processes are in
		// the group), then removes it.
		if err := t.group.Remove(); err != nil && t.r.Log != nil {
			t.r.Log.Warn("removing the trial's cgroup", "trial", t.spec.TrialID, "err", err)
		}
	}
	for _, f := range []*os.File{t.outR, t.errR, t.runscErrR} {
		if f != nil {
			f.Close()
		}
	}
	t.pipes.Wait()
	t.watch.Close()
	if t.scratch != nil {
		t.scratch.Close()
	}
}

func (t *trial) guestErr(doing string, err error) error {
	if msg := strings.TrimSpace(t.runscErr.String()); msg != "" {
		return fmt.Errorf("%w: %s: %w (runsc: %s)", dryexec.ErrGuest, doing, err, msg)
	}
	return fmt.Errorf("%w: %s: %w", dryexec.ErrGuest, doing, err)
}

// readFrame reads the next frame of conn, turning a guest's error frame
// into an error.
func readFrame(conn *wire.Conn) (*wire.Frame, error) {
	f, err := conn.Read()
	if err != nil {
		return nil, err
	}
	if f.Kind == wire.KindErr {
		var re wire.RemoteError
		f.Decode(&re)
		return nil, &re
	}
	return f, nil
}

// hello reads and checks a guest's hello.
func (t *trial) hello(conn *wire.Conn, role string) error {
	f, err := readFrame(conn)
	if err != nil {
		return t.guestErr("reading the "+role+" guest's hello", err)
	}
	var h wire.Hello
	if f.Kind != wire.KindHello || f.Decode(&h) != nil {
		return fmt.Errorf("%w: bad hello from the %s guest", dryexec.ErrGuest, role)
	}
	if h.Version != wire.Version || h.Role != role {
		return fmt.Errorf("%w: the guest %s speaks protocol %d as %q, this dryexec %d as %q (a dryexec-guest from another build?)",
			dryexec.ErrGuest, t.cmd.Path, h.Version, h.Role, wire.Version, role)
	}
	return nil
}

// prepare builds the view, pins the masks, and hands the view to runsc.
func (t *trial) prepare() error {
	if err := t.hello(t.view, wire.RoleGVisorView); err != nil {
		return err
	}
	start := wire.TrialStart{Mounts: t.mounts, UpperSize: t.spec.UpperSizeBytes, Masks: t.cover.Masks, Hidden: t.cover.Hidden}
	if t.net.GuestFile() != nil {
		// What a session guest gets for its TUN device and trust files
		// is what the view guest needs: the same fields, and the trust
		// variables for the command.
		var ss wire.SessionStart
		t.net.SetupSession(&ss, viewNetFD)
		start.Net, start.NetFD, start.TrustBundle, start.TrustPath = ss.Net, ss.NetFD, ss.TrustBundle, ss.TrustPath
		t.trustEnv = ss.Env
	}
	if err := t.view.Send(wire.KindReq, wire.VerbTrialStart, 1, &start, wire.Attachments(start.TrustBundle)...); err != nil {
		return t.guestErr("sending trial.start", err)
	}
	f, err := readFrame(t.view)
	if err != nil {
		return t.guestErr("building the view", err)
	}
	var tm wire.TrialMounts
	if f.Verb != wire.VerbTrialMounts || f.Decode(&tm) != nil {
		return fmt.Errorf("%w: unexpected %s %q before trial.mounts", dryexec.ErrGuest, f.Kind, f.Verb)
	}
	if t.uppers, err = checkUppers(tm.Paths, t.mounts); err != nil {
		return err
	}
	if err := t.openScratch(tm.ScratchFD); err != nil {
		return err
	}
	t.watch = linuxns.NewMaskWatch()
	if len(t.cover.Masks) > 0 {
		root, err := unix.Openat(t.scratchFD, "root", unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("opening the view's root: %w", err)
		}
		t.watch.PinRoot(root, t.cover.Masks)
		unix.Close(root)
	}
	t.r.trace("view")
	cfg, err := t.ociSpec()
	if err != nil {
		return err
	}
	// runsc's global flags: the view as the root with runsc's overlay off
	// (every write lands in our upper dirs); --file-access=shared, so that
	// gVisor asks the host for what it reads (with its default, exclusive,
	// it answered a read of an empty mask from its own cache, and the host
	// never saw the read); with netsim, --network=sandbox takes the TUN
	// device from the view guest's namespace, and --gso=false, as with host
	// segmentation offload gVisor handed the device segments netsim cannot
	// take (DNS over UDP went through, no TCP connection did).
	argv := []string{t.runsc, "--root", wire.GVisorState, "--platform=" + t.r.platform(),
		"--overlay2=none", "--ignore-cgroups", "--file-access=shared"}
	if t.net.GuestFile() != nil {
		argv = append(argv, "--network=sandbox", "--gso=false")
	} else {
		argv = append(argv, "--network=none")
	}
	argv = append(argv, t.r.RunscFlags...)
	argv = append(argv, "run", "--bundle", wire.GVisorBundle)
	keep := []int{viewStdoutFD, viewStderrFD, viewStdinFD, viewStubFD, viewInnerFD}
	for _, m := range [][2]int{{viewInnerFD, wire.CtrlFD}, {viewStdoutFD, wire.StdoutFD}, {viewStderrFD, wire.StderrFD},
		{viewStdinFD, wire.StdinFD}, {viewStubFD, wire.StubFD}} {
		argv = append(argv, "--pass-fd", strconv.Itoa(m[0])+":"+strconv.Itoa(m[1]))
	}
	argv = append(argv, "dryexec-"+t.spec.TrialID)
	ex := wire.GVisorExec{Path: t.runsc, Argv: argv, Config: cfg, Keep: keep}
	if err := t.view.Send(wire.KindReq, wire.VerbGVisorExec, 2, &ex); err != nil {
		return t.guestErr("sending gvisor.exec", err)
	}
	// The stream closes when the view guest execs runsc (close-on-exec).
	if f, err := readFrame(t.view); err == nil {
		return fmt.Errorf("%w: unexpected %s %q instead of runsc", dryexec.ErrGuest, f.Kind, f.Verb)
	} else if re := (*wire.RemoteError)(nil); errors.As(err, &re) {
		return t.guestErr("starting runsc", err)
	}
	t.viewCtrl.Close()
	t.viewCtrl = nil
	return nil
}

// openScratch takes the host's own handle on the view guest's scratch
// tmpfs, through /proc/PID/fd, before anything of the sandbox's runs: the
// host walks the upper dirs through it once the sandbox is gone.
func (t *trial) openScratch(fd int) error {
	if fd <= 0 {
		return fmt.Errorf("%w: the view guest named no scratch tmpfs", dryexec.ErrGuest)
	}
	h, err := unix.Open("/proc/"+strconv.Itoa(t.cmd.Process.Pid)+"/fd/"+strconv.Itoa(fd), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the view's scratch tmpfs: %w", err)
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(h, &sfs); err != nil || sfs.Type != unix.TMPFS_MAGIC {
		unix.Close(h)
		return fmt.Errorf("%w: the view guest's scratch descriptor is not a tmpfs", dryexec.ErrGuest)
	}
	t.scratch, t.scratchFD = os.NewFile(uintptr(h), "scratch"), h
	return nil
}

// checkUppers validates the view guest's list of upper dirs: each must be a
// clean absolute path within a planned mount.
func checkUppers(paths []string, mounts []wire.MountSpec) ([]fsdelta.Mount, error) {
	if len(paths) == 0 || len(paths) > 4096 {
		return nil, fmt.Errorf("%w: %d upper dirs", dryexec.ErrGuest, len(paths))
	}
	dm := make([]fsdelta.Mount, len(paths))
	for i, p := range paths {
		ok := false
		for _, m := range mounts {
			ok = ok || p == m.Path || m.Path == "/" || strings.HasPrefix(p, m.Path+"/")
		}
		if !strings.HasPrefix(p, "/") || path.Clean(p) != p || !ok {
			return nil, fmt.Errorf("%w: upper dir for %q is outside the planned mounts", dryexec.ErrGuest, p)
		}
		dm[i] = fsdelta.Mount{Path: p}
	}
	return dm, nil
}

// run prepares the sandbox, runs the command and builds the delta.
func (t *trial) run(ctx context.Context) (*dryexec.StateDelta, error) {
	a := t.spec.Action
	outer := ctx
	if a.TimeoutMS > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, a.Timeout()+t.r.walkGrace(), errOverdue)
		defer cancel()
	}
	// Cancelling ctx kills runsc, which breaks every stream.
	stop := context.AfterFunc(ctx, t.kill)
	defer stop()
	if err := t.prepare(); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("trial %s: %w", t.spec.TrialID, context.Cause(ctx))
		}
		return nil, err
	}
	t.out, t.errb = tail.New(t.spec.OutputCap), tail.New(t.spec.OutputCap)
	err := t.converse()
	if err != nil && !t.sent {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("trial %s: %w", t.spec.TrialID, context.Cause(ctx))
		}
		return nil, err
	}
	if err != nil && ctx.Err() != nil && !errors.Is(context.Cause(ctx), errOverdue) {
		return nil, fmt.Errorf("trial %s: %w", t.spec.TrialID, ctx.Err())
	}
	if err != nil && errors.Is(context.Cause(ctx), errOverdue) {
		err = fmt.Errorf("%w: no report within the command's timeout and %v more", dryexec.ErrGuest, t.r.walkGrace())
	}
	// Every write of the sandbox is in the upper dirs once runsc (and so
	// its sandbox) has ended: the host walks them only then.
	if err != nil {
		t.kill()
	}
	select {
	case <-t.waited:
	case <-ctx.Done():
		t.kill()
		<-t.waited
	}
	// Every packet the sandbox sent has reached netsim: its log is final.
	t.net.Close()
	if t.group != nil {
		// What the sandbox hit, read before the group goes: runsc's
		// sandbox and gofer may outlive runsc for a moment, and removing
		// the group kills them.
		t.limitHits = cgroup.Violations(t.group.Limits(), t.group.PidsHeadroom(), t.before, t.group.Stats())
		t.group.Remove()
		t.group = nil
	}
	t.r.trace("gone")
	return t.report(outer, err)
}

// upperFull says whether the tmpfs at fd has no block or inode left.
func upperFull(fd int) bool {
	var sfs unix.Statfs_t
	return unix.Fstatfs(fd, &sfs) == nil && (sfs.Bavail == 0 || sfs.Ffree == 0)
}

var errOverdue = errors.New("the gvisor sandbox did not report in time")

// kill ends runsc and, through the cgroup, its sandbox.
func (t *trial) kill() {
	if t.cmd != nil && t.cmd.Process != nil {
		t.cmd.Process.Kill()
	}
}

// converse starts the command inside gVisor and reads how it ended.
func (t *trial) converse() error {
	if err := t.hello(t.inner, wire.RoleGVisorTrial); err != nil {
		return err
	}
	t.r.trace("hello")
	a := t.spec.Action
	host, _ := os.Hostname()
	// The pids limit inside gVisor: the sandbox's processes are gVisor's,
	// not the host's, so the host's pids limit (the cgroup's) cannot count
	// them; gVisor enforces RLIMIT_NPROC, which the stub puts on the
	// command, as ns's rlimit fallback does.
	start := wire.TrialStart{Hostname: host, CommandUserNS: true, CommandNPROC: commandNPROC(t.spec.Limits)}
	if err := t.inner.Send(wire.KindReq, wire.VerbTrialStart, 1, &start); err != nil {
		return t.guestErr("sending trial.start", err)
	}
	env := make([]string, 0, len(a.Env))
	for k, v := range a.Env {
		env = append(env, k+"="+v)
	}
	// netsim's trust variables win over the caller's own (a CA bundle the
	// command was told about elsewhere would not hold netsim's CA); they
	// are the sandbox's plumbing, not recorded in the action.
	env = slices.DeleteFunc(env, func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.ContainsFunc(t.trustEnv, func(tv string) bool { return strings.HasPrefix(tv, k+"=") })
	})
	env = append(env, t.trustEnv...)
	sort.Strings(env)
	// gVisor's monotonic clock is its own: the guest times the command from
	// trial.run, which therefore goes before the command.
	run := wire.TrialRun{Argv: a.Argv, Env: env, Cwd: a.Cwd, TimeoutMS: a.TimeoutMS, Stdin: t.spec.Stdin != nil}
	req, err := wire.StubRequest(&run)
	if err != nil {
		return fmt.Errorf("%w: %w", dryexec.ErrBadAction, err)
	}
	run.Env = nil
	if err := t.inner.Send(wire.KindReq, wire.VerbTrialRun, 2, &run); err != nil {
		return t.guestErr("sending trial.run", err)
	}
	t.sent, t.sentAt = true, time.Now()
	_, err = t.stubW.Write(req)
	t.stubW.Close()
	t.stubW = nil
	if err != nil {
		return t.guestErr("sending the command", err)
	}
	t.startIO()
	for {
		f, err := readFrame(t.inner)
		if err != nil {
			return t.guestErr("reading the report", err)
		}
		switch f.Verb {
		case wire.VerbTrialExit:
			if t.exit != nil {
				return fmt.Errorf("%w: trial.exit twice", dryexec.ErrGuest)
			}
			ex := new(wire.TrialExit)
			if err := f.Decode(ex); err != nil {
				return t.guestErr("decoding trial.exit", err)
			}
			t.upperFull = t.upperFull || upperFull(t.scratchFD)
			t.exit = ex
			t.r.trace("exit")
		case wire.VerbTrialDone:
			if t.exit == nil {
				return fmt.Errorf("%w: trial.done before trial.exit", dryexec.ErrGuest)
			}
			done := new(wire.TrialDone)
			if err := f.Decode(done); err != nil {
				return t.guestErr("decoding trial.done", err)
			}
			t.done = done
			return nil
		default:
			return fmt.Errorf("%w: unexpected %s %q", dryexec.ErrGuest, f.Kind, f.Verb)
		}
	}
}

// startIO copies the command's output into the delta's buffers (and the
// caller's live writers), and its stdin from the caller.
func (t *trial) startIO() {
	spec := t.spec
	outR, errR := t.outR, t.errR
	t.outR, t.errR = nil, nil
	t.pipes.Go(func() { copyOut(t.out.Tee(spec.Stdout), outR) })
	t.pipes.Go(func() { copyOut(t.errb.Tee(spec.Stderr), errR) })
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

func copyOut(dst io.Writer, src *os.File) {
	defer src.Close()
	io.Copy(dst, src)
}

// report walks the upper dirs and builds the delta; cause is why the
// sandbox's own report is missing or cut short (nil: it is complete).
func (t *trial) report(ctx context.Context, cause error) (*dryexec.StateDelta, error) {
	a := t.spec.Action
	d := &dryexec.StateDelta{TrialID: t.spec.TrialID, Rung: Name, Action: a}
	d.Violations = append(d.Violations, t.limitHits...)
	d.Network = t.net.Log()
	if w := t.net.Warning(); w != "" {
		d.Warnings = append(d.Warnings, w)
	}
	if recs := t.net.Records(); t.spec.Exchanges != nil && len(recs) > 0 {
		b, err := json.Marshal(recs)
		if err == nil {
			err = t.spec.Exchanges.PutExchanges(b)
		}
		if err != nil {
			d.Warnings = append(d.Warnings, "the network exchanges' bodies were not kept: "+err.Error())
		}
	}
	d.Violations = append(d.Violations, t.watch.Check()...)
	d.Warnings = append(d.Warnings, t.warnings...)
	if w := t.watch.Warning(); w != "" {
		d.Warnings = append(d.Warnings, w)
	}
	end := time.Now()
	deadline := (&linuxns.Rung{CollectMin: t.r.CollectMin, CollectTimeout: t.r.CollectTimeout}).CollectDeadline(a, t.sentAt, end)
	werr := t.walk(ctx, deadline, d)
	var se *fsdelta.StoreError
	if errors.As(werr, &se) {
		return nil, fmt.Errorf("trial %s: %w", t.spec.TrialID, werr)
	}
	var why []string
	if cause != nil {
		why = append(why, fmt.Sprintf("the gvisor sandbox failed mid-trial (%v)", cause))
	}
	if werr != nil {
		why = append(why, fmt.Sprintf("the host's walk of the upper dirs failed (%v): the files listed are those walked before", werr))
	}
	d.Memory.Method = "none"
	p := &d.Process
	if ex := t.exit; ex != nil {
		p.ExitCode, p.Signal, p.TimedOut, p.DurationNS = ex.ExitCode, ex.Signal, ex.TimedOut, ex.DurationNS
		if ex.StartError != "" {
			t.errb.Write([]byte("dryexec: " + ex.StartError + "\n"))
		}
	} else {
		p.ExitCode = -1
		p.DurationNS = int64(end.Sub(t.sentAt))
		why = append(why, "the command's exit status is unknown (exit_code -1), and so are its CPU time and memory")
	}
	if dn := t.done; dn != nil {
		p.CPUUserNS, p.CPUSysNS, p.PeakRSSBytes = dn.CPUUserNS, dn.CPUSysNS, dn.MaxRSS
		d.Memory.PeakRSSBytes = dn.MaxRSS
	}
	if t.upperFull || upperFull(t.scratchFD) {
		d.Violations = append(d.Violations, dryexec.Violation{Kind: "limit",
			Detail: fmt.Sprintf("upper storage full: the trial may write at most %d bytes (--upper-size)", t.spec.UpperSizeBytes)})
	}
	if len(why) > 0 {
		d.Incomplete = true
		d.IncompleteReason = strings.Join(why, "; ")
		if t.r.Log != nil {
			t.r.Log.Warn("trial incomplete", "trial", t.spec.TrialID, "reason", d.IncompleteReason)
		}
	}
	if t.crossed != "" {
		d.Incomplete = true
		d.IncompleteReason = strings.TrimPrefix(d.IncompleteReason+"; "+t.crossed, "; ")
	}
	if t.expired {
		d.Incomplete = true
		msg := fmt.Sprintf("the trial ran out of time to collect what it wrote (%s after the command's start): "+
			"files past it are listed with their size, without their content", deadline.Sub(t.sentAt).Round(time.Millisecond))
		d.IncompleteReason = strings.TrimPrefix(d.IncompleteReason+"; "+msg, "; ")
	}
	t.pipes.Wait()
	out, otr := t.out.Bytes()
	errb, etr := t.errb.Bytes()
	p.Stdout, p.StdoutTruncated = string(out), otr
	p.Stderr, p.StderrTruncated = string(errb), etr
	d.Normalize()
	d.ComputeTotals()
	t.r.trace("done")
	return d, nil
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
