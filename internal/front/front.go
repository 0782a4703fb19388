// Package front owns the CLI's fast path: `dryexec run -- CMD` handed to a
// running daemon of this install from a process that links only the API's
// client (internal/apiclient), the root package and render. It is what
// cmd/dryexec-front runs before anything else; whatever it does not handle
// itself — every other command, any flag outside its few, no daemon, a
// daemon that does not take the trial, any mistake in how dryexec was
// called — it leaves to the engine (the whole CLI, internal/cli), which
// then does exactly what it always does. So the front never decides
// anything differently from the engine: it only does, in a lighter process,
// the one thing it can do exactly as the engine would. docs/api.md,
// "`dryexec run` through the daemon".
package front

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/mattn/go-isatty"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/apiclient"
	"github.com/dryexec/dryexec/render"
)

// Env is what the front may touch of its caller.
type Env struct {
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	// Environ lists the caller's variables (os.Environ), for --env NAME*.
	Environ []string
	// Cwd is the caller's working directory; "" is this process's.
	Cwd string
	// Terminals says which of the caller's Stdout and Stderr are
	// terminals; nil: whether Stdout and Stderr are *os.File terminals.
	Terminals *Terminals
}

// Terminals says which of a caller's standard streams are terminals (live
// output is then escaped, the summary coloured).
type Terminals struct{ Stdout, Stderr bool }

func (e Env) terminals() Terminals {
	if e.Terminals != nil {
		return *e.Terminals
	}
	return Terminals{Stdout: isTTY(e.Stdout), Stderr: isTTY(e.Stderr)}
}

// Daemon is a daemon that runs a trial request (a POST /v1/trials body) as
// its NDJSON stream does: apiclient.Conn over the API, or the daemon
// itself, in-process, for the small front (Serve). A failure before the
// trial started is an apiclient.BeforeStart.
type Daemon interface {
	RunTrial(ctx context.Context, req any, h apiclient.Hooks) (*dryexec.StateDelta, error)
}

// Exit codes the front itself gives (the same as internal/cli's).
const (
	exitReview        = 3
	exitBlock         = 4
	exitCommandFailed = 5
	exitRefused       = 1
	exitUsage         = 2
	exitInternal      = 125
	exitInterrupted   = 130
	exitTerminated    = 143
	exitBrokenPipe    = 141
)

// runArgs is a `run` invocation the front handles: only flags whose effect
// on the trial request it knows exactly.
type runArgs struct {
	via, cwd, exitStatus   string
	asJSON, quiet, noStore bool
	timeout                time.Duration
	pass, set              []string
	argv                   []string
}

// parseRun reads args (after the program name) as `run [FLAGS] -- CMD…`
// with FLAGS among --via, --json, -q/--quiet, --no-store, --exit-status,
// -C/--cwd, --timeout, --env and --pass-env; ok is false for anything else
// (the engine's cobra parser then reads it, and reports any mistake). The
// `--` is required: without it cobra reads flags among the command's own
// words, which the front does not imitate.
func parseRun(args []string) (r runArgs, ok bool) {
	if len(args) < 3 || args[0] != "run" {
		return r, false
	}
	r.exitStatus = "decision"
	rest := args[1:]
	for len(rest) > 0 {
		a := rest[0]
		rest = rest[1:]
		if a == "--" {
			r.argv = rest
			break
		}
		name, val, hasVal := strings.Cut(a, "=")
		takesValue := map[string]bool{"--via": true, "--exit-status": true, "-C": true, "--cwd": true, "--timeout": true, "--env": true, "--pass-env": true}
		if takesValue[name] && !hasVal {
			if len(rest) == 0 {
				return r, false
			}
			val, rest = rest[0], rest[1:]
		} else if hasVal && !takesValue[name] {
			return r, false
		}
		switch name {
		case "--via":
			r.via = val
		case "--json":
			r.asJSON = true
		case "-q", "--quiet":
			r.quiet = true
		case "--no-store":
			r.noStore = true
		case "--exit-status":
			if val != "decision" && val != "command" {
				return r, false
			}
			r.exitStatus = val
		case "-C", "--cwd":
			r.cwd = val
		case "--timeout":
			d, err := time.ParseDuration(val)
			if err != nil || d < 0 {
				return r, false
			}
			r.timeout = d
		case "--env":
			if strings.Contains(val, "=") {
				r.set = append(r.set, val)
			} else {
				r.pass = append(r.pass, val)
			}
		case "--pass-env":
			r.pass = append(r.pass, val)
		default:
			return r, false
		}
	}
	if len(r.argv) == 0 || r.argv[0] == "" {
		return r, false
	}
	for _, a := range r.argv {
		if strings.ContainsRune(a, 0) {
			return r, false
		}
	}
	return r, true
}

// TrialRequest is the part of the daemon's trial request (server.TrialRequest,
// docs/api.md) the front sends: what internal/cli's daemonRequest sends for
// the same flags. server's TestFrontRequestMatchesServer keeps the two in
// step.
type TrialRequest struct {
	Argv      []string          `json:"argv"`
	Cwd       string            `json:"cwd"`
	Env       map[string]string `json:"env,omitempty"`
	TimeoutMS int64             `json:"timeout_ms,omitempty"`
	Rung      string            `json:"rung,omitempty"`
	NoStore   bool              `json:"no_store,omitempty"`
	EnvExact  bool              `json:"env_exact,omitempty"`
	Home      string            `json:"home,omitempty"`
}

// text reports whether every string of the request is valid UTF-8: the
// only strings the API's JSON carries unchanged (encoding/json replaces
// each invalid byte with U+FFFD, so a file name in Latin-1 would reach the
// trial as another name).
func (r TrialRequest) text() bool {
	if !utf8.ValidString(r.Cwd) || !utf8.ValidString(r.Home) {
		return false
	}
	for _, a := range r.Argv {
		if !utf8.ValidString(a) {
			return false
		}
	}
	for k, v := range r.Env {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return false
		}
	}
	return true
}

// Run runs args (after the program name) if it is a `run` the front
// handles and a daemon of this install takes the trial; handled is false
// when the engine must run them instead (nothing has been written to
// Stdout or Stderr then, and nothing ran). code is the exit code.
func Run(ctx context.Context, args []string, env Env) (code int, handled bool) {
	return run(ctx, args, env, func(home string) (Daemon, string, bool) {
		dc, err := apiclient.Dial(env.Getenv, home, nil)
		if err != nil {
			return nil, "", false
		}
		return dc, dc.Where, true
	})
}

// Serve is Run inside the daemon d (where names it in messages), for a
// caller that sent its arguments, environment, working directory and
// terminals: the small front (docs/architecture.md, "The front and the
// engine"). handled is false, with nothing written to env's streams and
// nothing run, exactly when Run would leave the arguments to the engine.
func Serve(ctx context.Context, args []string, env Env, d Daemon, where string) (code int, handled bool) {
	return run(ctx, args, env, func(string) (Daemon, string, bool) { return d, where, true })
}

func run(ctx context.Context, args []string, env Env, dial func(home string) (Daemon, string, bool)) (code int, handled bool) {
	r, ok := parseRun(args)
	if !ok {
		return 0, false
	}
	via := r.via
	if via == "" {
		via = env.Getenv("DRYEXEC_VIA")
	}
	if via != "" && via != "auto" && via != "daemon" {
		return 0, false // local, or a mistake the engine reports
	}
	if env.Getenv("DRYEXEC_TRIAL_CONTENT_CAP") != "" {
		return 0, false // a setting the engine reads and checks
	}
	home, err := dryexec.DefaultHome(env.Getenv)
	if err != nil {
		return 0, false
	}
	cwd, ok := checkCwd(env.Cwd, r.cwd)
	if !ok {
		return 0, false
	}
	req := TrialRequest{Argv: r.argv, Cwd: cwd, TimeoutMS: r.timeout.Milliseconds(), Rung: "ns", NoStore: r.noStore, EnvExact: true}
	if req.Env, err = dryexec.SandboxEnv(env.Getenv, env.Environ, r.pass, r.set); err != nil {
		return 0, false
	}
	req.Env["PWD"] = cwd
	// Without a daemon the engine looks again (one stat when none
	// listens) and runs the trial itself, or refuses with --via daemon.
	// The daemon is not asked GET /v1/version first: the request's home
	// has it refuse, before the trial starts, a trial for another store
	// (409 other_home), and a daemon too old to know the field refuses it
	// as unknown (400). Either is a failure before the start, which the
	// engine then handles as it always does (it asks, and says why).
	dc, where, ok := dial(home)
	if !ok {
		return 0, false
	}
	if req.Home, err = filepath.Abs(home); err != nil {
		return 0, false
	}
	if !req.text() {
		// The API's JSON would replace those bytes with U+FFFD, and the
		// trial would run something else: the engine runs it in-process.
		return 0, false
	}
	var live []*render.LiveWriter
	hooks := apiclient.Hooks{
		Queued: func() {
			if !r.quiet {
				fmt.Fprintf(env.Stderr, "dryexec: the daemon (%s) runs as many trials as it may; this one waits for a slot\n", where)
			}
		},
	}
	note := "nothing was changed"
	hooks.Started = func(id string) {
		note = fmt.Sprintf("trial %s was stopped before it finished; nothing of it was kept (a trial never changes the host)", id)
	}
	if !r.quiet {
		outW := env.Stdout
		if r.asJSON {
			outW = env.Stderr
		}
		tty := env.terminals()
		lo, le := render.NewLiveWriterPair(outW, tty.Stdout && !r.asJSON || tty.Stderr && r.asJSON, env.Stderr, tty.Stderr)
		hooks.Stdout, hooks.Stderr, live = lo, le, []*render.LiveWriter{lo, le}
	}
	d, err := dc.RunTrial(ctx, req, hooks)
	for _, l := range live {
		l.Flush()
	}
	if ctx.Err() != nil {
		return interrupted(ctx, env, note), true
	}
	var bs apiclient.BeforeStart
	if errors.As(err, &bs) {
		// Nothing ran: the engine runs it, or reports the refusal, as it
		// would have from the start.
		return 0, false
	}
	if err != nil {
		fmt.Fprintln(env.Stderr, "dryexec:", err)
		switch {
		case errors.Is(err, dryexec.ErrBadAction):
			return exitUsage, true
		case errors.Is(err, dryexec.ErrIsolationUnavailable):
			fmt.Fprintln(env.Stderr, "dryexec: see dryexec doctor for what this host provides")
			return exitRefused, true
		}
		return exitInternal, true
	}
	if !r.noStore {
		note = fmt.Sprintf("trial %s ran and is stored, pending (dryexec show %s | dryexec commit %s | dryexec discard %s); the host is unchanged", d.TrialID, d.TrialID, d.TrialID, d.TrialID)
	} else {
		note = fmt.Sprintf("trial %s ran; it was not stored (--no-store) and the host is unchanged", d.TrialID)
	}
	if r.asJSON {
		err = d.WriteJSON(env.Stdout)
	} else {
		bw := bufio.NewWriterSize(env.Stdout, 64<<10)
		err = render.Summary(bw, d, render.Options{Color: render.ColorWantedOn(env.terminals().Stdout, env.Getenv), OutputShown: live != nil, NoCommands: r.noStore})
		if ferr := bw.Flush(); err == nil {
			err = ferr
		}
	}
	if ctx.Err() != nil {
		return interrupted(ctx, env, note), true
	}
	if err != nil {
		fmt.Fprintln(env.Stderr, "dryexec:", err)
		return exitInternal, true
	}
	return RunStatus(r.exitStatus, d), true
}

// checkCwd is the directory the trial starts in: -C's, made absolute
// against the caller's wd ("": this process's), else wd; ok is false if it
// is not a directory (the engine says why).
func checkCwd(wd, cwd string) (string, bool) {
	if wd == "" {
		var err error
		if wd, err = os.Getwd(); err != nil {
			return "", false
		}
	}
	if cwd == "" {
		cwd = wd
	}
	if strings.ContainsRune(cwd, 0) || !filepath.IsAbs(wd) {
		return "", false
	}
	abs := cwd
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(wd, abs)
	}
	abs = filepath.Clean(abs)
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return "", false
	}
	return abs, true
}

// interrupted says what an interrupt did to the trial, as the engine does,
// and returns the exit code a shell gives a death by that signal.
func interrupted(ctx context.Context, env Env, note string) int {
	sig, code := InterruptedBy(ctx)
	fmt.Fprintf(env.Stderr, "dryexec: interrupted (%s): %s\n", sig, note)
	return code
}

// Interrupt is the cause of a context ended by the signal sig, as
// signal.NotifyContext gives it (InterruptedBy reads it): how the daemon
// ends a small front's run when its caller is interrupted.
func Interrupt(sig os.Signal) error { return fmt.Errorf("%v signal received", sig) }

// InterruptedBy names what ended ctx and the exit code for it. The cause of
// signal.NotifyContext's cancellation names the signal ("interrupt signal
// received", "terminated signal received").
func InterruptedBy(ctx context.Context) (string, int) {
	cause := context.Cause(ctx)
	if cause != nil && strings.HasPrefix(cause.Error(), "terminated") {
		return "SIGTERM", exitTerminated
	}
	if cause != nil && strings.HasPrefix(cause.Error(), "interrupt") {
		return "SIGINT", exitInterrupted
	}
	if cause != nil && strings.HasPrefix(cause.Error(), syscall.SIGPIPE.String()) {
		return "SIGPIPE: the output's reader is gone", exitBrokenPipe
	}
	return "cancelled", exitInterrupted
}

// RunStatus is `run`'s status for a trial that ran (docs/decision.md): with
// --exit-status command the command's own; else the decision's, with a
// failed command told apart from other reviews.
func RunStatus(mode string, d *dryexec.StateDelta) int {
	if mode == "command" {
		return d.Process.ExitCode
	}
	switch d.Decision.Choice {
	case "auto_commit":
		return 0
	case "block":
		return exitBlock
	}
	if d.Process.ExitCode != 0 || d.Process.TimedOut || d.Process.Signal != "" {
		return exitCommandFailed
	}
	return exitReview
}

func isTTY(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// EngineName is the engine's file name beside the front (`make build`).
const EngineName = "dryexec-engine"

// Engine is the engine's path: $DRYEXEC_ENGINE, else dryexec-engine in the
// directory of the front's own executable.
func Engine(getenv func(string) string, executable func() (string, error)) (string, error) {
	if p := getenv("DRYEXEC_ENGINE"); p != "" {
		return p, nil
	}
	self, err := executable()
	if err != nil {
		return "", fmt.Errorf("the engine: this program's path is unknown (%v); set DRYEXEC_ENGINE", err)
	}
	if r, err := filepath.EvalSymlinks(self); err == nil {
		self = r
	}
	p := filepath.Join(filepath.Dir(self), EngineName)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("the engine %s is not beside this front end (%v): `make build` puts both in bin/ (or set DRYEXEC_ENGINE; `go run ./cmd/dryexec` is the whole CLI in one)", EngineName, err)
	}
	return p, nil
}
