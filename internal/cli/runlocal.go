package cli

import (
	"context"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/policy"
	"github.com/dryexec/dryexec/receipt"
	"github.com/dryexec/dryexec/render"
	"github.com/dryexec/dryexec/rung"
	"github.com/dryexec/dryexec/runner"
	"github.com/dryexec/dryexec/store"
)

// runLocal runs `run`'s trial in this process (runner.Run on the rung
// named): the path without a daemon. engine is nil unless --policy named a
// file (then pol is it); capSet says --content-cap gave cc. It returns the
// delta and the store it was recorded in (with noStore, the store opened
// only to be hidden from the sandbox).
func runLocal(ctx context.Context, env Env, home, rungName string, pol policy.Policy, engine *policy.Engine, spec dryexec.TrialSpec,
	noStore, capSet bool, cc int64, live []*render.LiveWriter, note *interruptNote) (*dryexec.StateDelta, *store.Store, error) {
	var err error
	// The built-in policy is compiled (CEL: a few ms of CPU) beside the
	// rung's probe, the receipt key and the store's start-up, which wait
	// on the file system more than they compute; it is a program's own,
	// so it does not fail on anything the caller gave.
	var compileErr error
	compiled := make(chan struct{})
	go func() {
		defer close(compiled)
		if engine == nil {
			engine, compileErr = policy.Compile(pol)
		}
	}()
	defer func() { <-compiled }() // never left running past a failure below
	r, err := rung.Select(ctx, rungName)
	if err != nil {
		return nil, nil, err
	}
	// The install's receipt key is loaded before the trial (a bad key
	// costs no trial); the runner masks it inside the sandbox.
	signer, err := receipt.LoadOrCreate(home)
	if err != nil {
		return nil, nil, err
	}
	// The runner hides the store whole (with a daemon's state dir and
	// its bearer token beneath it), the store this process's
	// DRYEXEC_HOME names, as env says, which the rung's own defaults
	// (read from the process environment) may not know.
	var st *store.Store
	var opt runner.Options
	if noStore {
		// Opened only to be hidden: nothing is recorded, so the store
		// needs no recovering first; what a killed dryexec's sandboxes
		// left does.
		if st, err = store.Open(home, 0); err != nil {
			return nil, nil, err
		}
		env.sweep.start()
		// The spill (what the trial wrote, past what memory holds) goes
		// where the runner puts a stored trial's, the store's directory,
		// hidden from every sandbox: not /tmp, which they all see.
		opt.NoStore = true
	} else {
		if st, err = startStore(env); err != nil {
			return nil, nil, err
		}
		if capSet {
			opt.ContentCap = cc
		}
	}
	if <-compiled; compileErr != nil {
		return nil, nil, usageError{compileErr}
	}
	run, err := runner.New(st, signer)
	if err != nil {
		return nil, nil, err
	}
	opt.Started = func(id string) {
		note.set("trial %s was stopped before it finished; nothing of it was kept (a trial never changes the host)", id)
	}
	opt.Ran = func() {
		for _, l := range live {
			l.Flush()
		}
	}
	d, err := run.Run(ctx, r, engine, spec, opt)
	if err != nil {
		if !noStore {
			autoGC(st)
		}
		return nil, nil, err
	}
	return d, st, nil
}
