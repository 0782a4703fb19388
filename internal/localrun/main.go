package localrun

import (
	"context"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/apiclient"
	"github.com/dryexec/dryexec/internal/runflags"
	"github.com/dryexec/dryexec/policy"
)

// Rung is the rung the local engine runs its trials on: run's default.
const Rung = "ns"

// Main is the local engine (cmd/dryexec-local): it runs args (after the
// program name) as the engine's `dryexec run` would, when they are a run it
// takes — runflags.Parse's, and no daemon to ask: --via local, or auto
// (flag or $DRYEXEC_VIA) where none of this install can answer (no socket,
// no $DRYEXEC_URL or $DRYEXEC_SOCKET: apiclient.Dial, whose failure the
// engine's auto also takes to mean "run it here"). taken is false
// otherwise, and then nothing was written and nothing ran: the engine runs
// them. open opens the rung named Rung.
//
// It does what the engine's run does for the same flags, step by step with
// the same functions of this package, so that its output, exit code and
// stored trial are the engine's (internal/cli's TestLocalSameAsEngine
// compares the two binaries).
func Main(ctx context.Context, args []string, env Env, open Opener) (code int, taken bool) {
	f, argv, ok := runflags.Parse(args)
	if !ok {
		return 0, false
	}
	// A value the engine refuses is refused here the same way (run
	// below); one that names a daemon is the engine's.
	if via, err := Via(f.Via, env); err == nil && via != ViaLocal {
		if via == ViaDaemon {
			return 0, false
		}
		home, err := dryexec.DefaultHome(env.Getenv)
		if err != nil {
			return 0, false
		}
		if _, err := apiclient.Dial(env.Getenv, home, nil); err == nil {
			return 0, false // a daemon may answer: the engine asks it
		}
	}
	env.Sweep = &Sweep{}
	defer env.Sweep.Wait()
	ctx, env.Interrupt = context.WithCancelCause(ctx)
	defer env.Interrupt(nil)
	note := NewNote("nothing was changed")
	code, err := run(ctx, env, f, argv, open, note)
	if ctx.Err() != nil {
		return Interrupted(ctx, env, note), true
	}
	if err != nil {
		return Failed(env, err), true
	}
	return code, true
}

// run is the engine's `run` (internal/cli, runCmd) for the flags in f
// alone: its steps in its order.
func run(ctx context.Context, env Env, f runflags.Local, argv []string, open Opener, note *Note) (int, error) {
	LimitMemory(env)
	if err := CheckExitStatus(f.ExitStatus); err != nil {
		return 0, err
	}
	if _, err := Via(f.Via, env); err != nil {
		return 0, err
	}
	cwd, err := CheckArgs(argv, f.Cwd, f.Timeout, dryexec.DefaultOutputCap, dryexec.DefaultUpperSizeBytes)
	if err != nil {
		return 0, err
	}
	// No --net: no rule to check (the engine's checkNetSpecs has none).
	home, err := dryexec.DefaultHome(env.Getenv)
	if err != nil {
		return 0, err
	}
	spec, err := NewSpec(env, argv, cwd, f.Timeout, f.Env, f.PassEnv, false)
	if err != nil {
		return 0, err
	}
	live := Live(env, &spec, f.Quiet, f.JSON)
	// No daemon answers (Main checked): the trial runs here, as the
	// engine's auto then runs it.
	t := Trial{Home: home, Open: open, Rung: Rung, Policy: policy.Default(), NoStore: f.NoStore, Live: live, Note: note}
	d, st, err := t.Local(ctx, env, spec)
	if err != nil {
		return 0, err
	}
	if !f.NoStore {
		defer AutoGC(st)
	}
	err = Report(env, d, note, f.JSON, live != nil, f.NoStore)
	return Status(f.ExitStatus, d), err
}
