package localrun

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/mattn/go-isatty"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/front"
	"github.com/dryexec/dryexec/internal/runflags"
	"github.com/dryexec/dryexec/policy"
	"github.com/dryexec/dryexec/receipt"
	"github.com/dryexec/dryexec/render"
	"github.com/dryexec/dryexec/runner"
	"github.com/dryexec/dryexec/store"
)

// Where `dryexec run` runs its trial: --via, else $DRYEXEC_VIA, else auto
// (the user's daemon when one of this install answers, in-process
// otherwise). docs/api.md, "dryexec run through the daemon".
const (
	ViaAuto   = "auto"
	ViaDaemon = "daemon"
	ViaLocal  = "local"
)

// Via is the --via value in effect: the flag, else DRYEXEC_VIA, else auto.
func Via(flag string, env Env) (string, error) {
	v, from := flag, "--via"
	if v == "" {
		v, from = env.Getenv("DRYEXEC_VIA"), "DRYEXEC_VIA"
	}
	switch v {
	case "":
		return ViaAuto, nil
	case ViaAuto, ViaDaemon, ViaLocal:
		return v, nil
	}
	return "", UsageError{fmt.Errorf("%s %q: want auto (the daemon if one answers, else in-process), daemon or local", from, v)}
}

// runMemoryLimit is `dryexec run`'s soft heap limit (debug.SetMemoryLimit)
// when GOMEMLIMIT does not set one.
const runMemoryLimit = 128 << 20

// LimitMemory sets a soft limit on this process's heap, unless GOMEMLIMIT
// sets one: Go's default lets the heap grow to twice what is live before it
// collects, and a trial of a million files has hundreds of MB live. Under
// the limit the collector runs more often instead (at most half a CPU, by
// the runtime's own guard, when more than the limit is live). A small trial
// never gets near it. docs/limits.md, "Big deltas: memory".
func LimitMemory(env Env) {
	if env.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(runMemoryLimit)
	}
}

// CheckExitStatus checks --exit-status's value.
func CheckExitStatus(v string) error {
	if v != runflags.ExitDecision && v != runflags.ExitCommand {
		return UsageError{fmt.Errorf("--exit-status %q: want decision (the default) or command", v)}
	}
	return nil
}

// Status is run's status for a trial that ran: the decision's code, or the
// command's own (the guest already made a signal 128+N and a timeout 124,
// as shells and timeout(1) do). The front (internal/front) gives the same
// status for a trial it ran through the daemon: the rule is its, for both.
func Status(mode string, d *dryexec.StateDelta) int { return front.RunStatus(mode, d) }

// CheckArgs checks `run`'s arguments that need no trial (but the rung's
// name, which the engine checks against the rungs it has) and returns the
// working directory, absolute. Every failure is a usage error that says
// what to do.
func CheckArgs(argv []string, cwd string, timeout time.Duration, outputCap int, upperSize int64) (string, error) {
	if len(argv) == 0 || argv[0] == "" {
		return "", UsageError{errors.New("no command: give it after --, as in dryexec run -- make test")}
	}
	for _, a := range argv {
		if strings.ContainsRune(a, 0) {
			return "", UsageError{errors.New("an argument of the command contains a NUL byte, which no program can receive")}
		}
	}
	if timeout < 0 {
		return "", UsageError{fmt.Errorf("--timeout %s: must not be negative (0: no timeout)", timeout)}
	}
	if outputCap < 0 {
		return "", UsageError{fmt.Errorf("--output-cap %d: must not be negative", outputCap)}
	}
	if upperSize < 0 {
		return "", UsageError{fmt.Errorf("--upper-size %d: must not be negative (0: the default, %d)", upperSize, dryexec.DefaultUpperSizeBytes)}
	}
	if cwd == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", UsageError{fmt.Errorf("the current directory cannot be read (%v): give one with -C DIR", err)}
		}
		cwd = wd
	}
	if strings.ContainsRune(cwd, 0) {
		return "", UsageError{errors.New("-C: the directory name contains a NUL byte")}
	}
	abs, err := filepath.Abs(cwd)
	if err != nil {
		return "", UsageError{fmt.Errorf("-C %s: %v", cwd, err)}
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return "", UsageError{fmt.Errorf("-C %s: not a directory on the host (%s); give an existing directory", cwd, StatReason(err))}
	}
	return abs, nil
}

// StatReason words a failed or successful stat of something that had to be
// a directory.
func StatReason(err error) string {
	switch {
	case err == nil:
		return "it is not a directory"
	case errors.Is(err, os.ErrNotExist):
		return "it does not exist"
	case errors.Is(err, os.ErrPermission):
		return "permission denied"
	}
	return err.Error()
}

// CallerEnviron lists the caller's variables that env.Getenv agrees with,
// for --env NAME* patterns.
func CallerEnviron(env Env) []string {
	var out []string
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok && env.Getenv(k) == v {
			out = append(out, kv)
		}
	}
	return out
}

// NewSpec is the trial of argv in cwd (CheckArgs's), with the command's
// environment an allowlist (dryexec.SandboxEnv; dryexec.ImageCallerEnv on
// an image): --env NAME passes a variable through (as --pass-env NAME
// does), --env NAME=VALUE sets one. The rest of the spec is the defaults,
// which the engine's other flags change.
func NewSpec(env Env, argv []string, cwd string, timeout time.Duration, setEnv, passEnv []string, image bool) (dryexec.TrialSpec, error) {
	pass, set := passEnv, []string(nil)
	for _, kv := range setEnv {
		if strings.Contains(kv, "=") {
			set = append(set, kv)
		} else {
			pass = append(pass, kv)
		}
	}
	a := dryexec.Action{Argv: argv, Cwd: cwd, TimeoutMS: timeout.Milliseconds()}
	sandboxEnv := dryexec.SandboxEnv
	if image {
		sandboxEnv = dryexec.ImageCallerEnv
	}
	var err error
	if a.Env, err = sandboxEnv(env.Getenv, CallerEnviron(env), pass, set); err != nil {
		return dryexec.TrialSpec{}, UsageError{err}
	}
	a.Env["PWD"] = cwd
	return dryexec.TrialSpec{TrialID: dryexec.NewTrialID(), Action: a, OutputCap: dryexec.DefaultOutputCap, UpperSizeBytes: dryexec.DefaultUpperSizeBytes}, nil
}

// Live shows the command's stdout and stderr as it runs, unless quiet (the
// delta still holds their tails, within the output cap): it sets spec's
// writers and returns them, to be flushed when the command has run. With
// --json, stdout holds only the delta, so both go to stderr.
func Live(env Env, spec *dryexec.TrialSpec, quiet, asJSON bool) []*render.LiveWriter {
	if quiet {
		return nil
	}
	outW := env.Stdout
	if asJSON {
		outW = env.Stderr
	}
	lo, le := render.NewLiveWriterPair(brokenPipe{outW, env.Interrupt}, IsTTY(outW), brokenPipe{env.Stderr, env.Interrupt}, IsTTY(env.Stderr))
	spec.Stdout, spec.Stderr = lo, le
	return []*render.LiveWriter{lo, le}
}

// brokenPipe passes writes to w, and ends the run (interrupt) when one
// finds w's reader gone: the command's output has nowhere to go, as for
// a native `cmd | head` whose cmd then dies of SIGPIPE. Without it, the
// live writer would drop the rest and the trial run on to its end (`yes`
// until its timeout). The write fails with EPIPE, rather than kill the
// process as the Go runtime does for fds 1 and 2, only while
// CatchBrokenPipe holds.
type brokenPipe struct {
	w         io.Writer
	interrupt context.CancelCauseFunc
}

func (b brokenPipe) Write(p []byte) (int, error) {
	n, err := b.w.Write(p)
	if err != nil && b.interrupt != nil && errors.Is(err, syscall.EPIPE) {
		b.interrupt(front.Interrupt(syscall.SIGPIPE))
	}
	return n, err
}

// CatchBrokenPipe has a write to a stdout or stderr whose reader is gone
// fail with EPIPE instead of killing the process (the Go runtime's
// default for fds 1 and 2), until the returned release is called: while
// a trial runs here, so that the live output's brokenPipe ends it as an
// interrupt, its sandbox torn down, rather than the process dying with the
// sandbox's cgroups left for the next command to sweep. It is released
// before the summary: a summary that cannot be written then ends the
// process as before, its trial already recorded and its sandbox gone.
func CatchBrokenPipe() (release func()) {
	c := make(chan os.Signal, 1) // never read: the signal itself is not needed
	signal.Notify(c, syscall.SIGPIPE)
	return func() { signal.Stop(c) }
}

// IsTTY reports whether w is a terminal (whatever NO_COLOR says): live
// output to it is escaped (render.LiveWriter).
func IsTTY(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// Color reports whether what goes to w is coloured (render.ColorWanted).
func Color(w io.Writer, env Env) bool {
	f, ok := w.(*os.File)
	return ok && render.ColorWanted(f, env.Getenv)
}

// Opener opens the rung a trial runs on, by name (rung.Select in the
// engine, which has them all).
type Opener func(ctx context.Context, name string) (dryexec.Rung, error)

// prestarter is a rung that prepares one trial's sandbox ahead
// (linuxns.Rung.Prestart): a pool of one, which never refills.
type prestarter interface {
	Prestart(ctx context.Context, spec dryexec.TrialSpec) dryexec.Pool
}

// Trial is a run's trial in this process: what Local needs besides the
// spec.
type Trial struct {
	Home string
	Open Opener
	Rung string
	// Policy decides; Engine is nil unless --policy named a file (then
	// Policy is it, compiled).
	Policy policy.Policy
	Engine *policy.Engine
	// NoStore: not recorded. CapSet says --content-cap gave Cap.
	NoStore bool
	CapSet  bool
	Cap     int64
	Live    []*render.LiveWriter
	Note    *Note
}

// Local runs t's trial in this process (runner.Run on the rung named): the
// path without a daemon. It returns the delta and the store it was recorded
// in (with NoStore, the store opened only to be hidden from the sandbox).
func (t Trial) Local(ctx context.Context, env Env, spec dryexec.TrialSpec) (*dryexec.StateDelta, *store.Store, error) {
	var err error
	engine := t.Engine
	var compileErr error
	compiled := make(chan struct{})
	compile := func() {
		defer close(compiled)
		if engine == nil {
			engine, compileErr = policy.Compile(t.Policy)
		}
	}
	if len(t.Live) > 0 {
		// Released last, once the sandbox is gone (pre.Close below).
		defer CatchBrokenPipe()()
	}
	r, err := t.Open(ctx, t.Rung)
	if err != nil {
		return nil, nil, err
	}
	// A rung that can prepare the trial's sandbox ahead (ns) starts it
	// now, for the spec as the runner will protect it: its guest starts
	// and builds the view while the receipt key, the store and the policy
	// get ready below, rather than after them. The trial runs in it, or
	// cold if what it needs changed meanwhile (a mask that appeared); the
	// delta is the same either way.
	if p, ok := r.(prestarter); ok {
		pre := p.Prestart(ctx, runner.ProtectFor(t.Home, receipt.KeyPath(t.Home), spec))
		// The sandbox is torn down while the runner judges, signs and
		// records the delta (Prestarted.Trial returns first); Close waits
		// for it before the summary is printed, so that a command killed
		// while printing (SIGPIPE of `| head`) leaves nothing behind.
		defer pre.Close()
		r = pre
	}
	// The built-in policy is compiled (a few ms of CPU) beside the
	// receipt key and the store's start-up, which wait on the file system
	// more than they compute; it is a program's own, so it does not fail
	// on anything the caller gave. It starts after the sandbox's start
	// above, which is the trial's path: with two CPUs, a compile started
	// first held one of them, and the sandbox's goroutine began ≈ 3 ms
	// late here (the run as a whole is CPU-bound there, so its total did
	// not measurably change: docs/benchmarks.md).
	go compile()
	defer func() { <-compiled }() // never left running past a failure below
	// The install's receipt key is loaded before the trial (a bad key
	// costs no trial); the runner masks it inside the sandbox.
	signer, err := receipt.LoadOrCreate(t.Home)
	if err != nil {
		return nil, nil, err
	}
	// A process's first signature builds what later ones reuse: the
	// delta's JSON encoders, which its digest uses. Built now, beside the
	// sandbox's start, they are not between the command's end and the
	// summary. The digest alone, not a signature: its scalar
	// multiplication (≈ 45 µs) would warm nothing (receipt.Signer builds
	// no table for a process that signs this few).
	go receipt.DeltaDigest(&dryexec.StateDelta{})
	// The runner hides the store whole (with a daemon's state dir and
	// its bearer token beneath it), the store this process's
	// DRYEXEC_HOME names, as env says, which the rung's own defaults
	// (read from the process environment) may not know.
	var st *store.Store
	var opt runner.Options
	if t.NoStore {
		// Opened only to be hidden: nothing is recorded, so the store
		// needs no recovering first; what a killed dryexec's sandboxes
		// left does.
		if st, err = store.Open(t.Home, 0); err != nil {
			return nil, nil, err
		}
		env.Sweep.Start()
		// The spill (what the trial wrote, past what memory holds) goes
		// where the runner puts a stored trial's, the store's directory,
		// hidden from every sandbox: not /tmp, which they all see.
		opt.NoStore = true
	} else {
		if st, err = StartStore(env); err != nil {
			return nil, nil, err
		}
		if t.CapSet {
			opt.ContentCap = t.Cap
		}
	}
	if <-compiled; compileErr != nil {
		return nil, nil, UsageError{compileErr}
	}
	run, err := runner.New(st, signer)
	if err != nil {
		return nil, nil, err
	}
	opt.Started = func(id string) {
		t.Note.Set("trial %s was stopped before it finished; nothing of it was kept (a trial never changes the host)", id)
	}
	opt.Ran = func() {
		for _, l := range t.Live {
			l.Flush()
		}
	}
	d, err := run.Run(ctx, r, engine, spec, opt)
	if err != nil {
		if !t.NoStore {
			AutoGC(st)
		}
		return nil, nil, err
	}
	return d, st, nil
}

// Report prints the trial that ran, d — its delta as JSON, or its summary
// — and sets note to what an interrupt from now on leaves of it.
// outputShown says the command's output was shown live.
func Report(env Env, d *dryexec.StateDelta, note *Note, asJSON, outputShown, noStore bool) error {
	if !noStore {
		note.Set("trial %s ran and is stored, pending (dryexec show %s | dryexec commit %s | dryexec discard %s); the host is unchanged", d.TrialID, d.TrialID, d.TrialID, d.TrialID)
	} else {
		note.Set("trial %s ran; it was not stored (--no-store) and the host is unchanged", d.TrialID)
	}
	if asJSON {
		return d.WriteJSON(env.Stdout) // the same bytes, one file at a time
	}
	// Buffered: the summary is a line per file, and a line per write(2)
	// made a million-file summary take minutes.
	bw := bufio.NewWriterSize(env.Stdout, 64<<10)
	// Not stored, the trial has no commit or discard to offer.
	err := render.Summary(bw, d, render.Options{Color: Color(env.Stdout, env), OutputShown: outputShown, NoCommands: noStore})
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	return err
}
