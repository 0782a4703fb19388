// Package runner owns the trial pipeline: one trial, end to end, the same for
// every front end (`dryexec run`, the daemon and so the SDK and MCP). It hides
// the install's own state from the sandbox, records the trial in the store
// while it runs, has the rung run it, decides it with the policy engine,
// signs the receipt, and keeps the delta — or, if any step fails, keeps
// nothing. It also owns the explicit start-up recovery (Recover): what an
// earlier process that was killed mid-trial left behind.
package runner

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/policy"
	"github.com/dryexec/dryexec/receipt"
	"github.com/dryexec/dryexec/store"
)

// ErrMissing: a runner or a trial was asked for without one of the parts it
// cannot do without (the store, the signer, the rung, the decision engine).
// A trial refused for it never starts.
var ErrMissing = errors.New("runner: missing part")

// Runner runs the trials of one install: its store and its receipt key. It
// holds no per-trial state and is safe for concurrent use.
type Runner struct {
	store  *store.Store
	signer *receipt.Signer
}

// New returns the runner of the install whose trials st keeps and whose key
// signer holds. Both are required: a trial that is not signed cannot be
// committed, so there is no unsigned way through.
func New(st *store.Store, signer *receipt.Signer) (*Runner, error) {
	if st == nil || signer == nil {
		return nil, fmt.Errorf("%w: a store and a signer are required", ErrMissing)
	}
	return &Runner{store: st, signer: signer}, nil
}

// Store is the store the runner records trials in.
func (r *Runner) Store() *store.Store { return r.store }

// Options are what one trial asks of the pipeline besides its spec. The zero
// value stores the trial with the store's content cap.
type Options struct {
	// NoStore runs the trial without keeping it: nothing is written to the
	// store and it cannot be committed later (`run --no-store`). It is still
	// decided and signed.
	NoStore bool
	// ContentCap bounds the file content the store keeps of this trial (0:
	// the store's limit; -1: none; docs/limits.md).
	ContentCap int64
	// Started is called with the trial's id once it is being recorded, just
	// before the rung starts the command (the daemon streams it; the CLI
	// words its interrupt note with it).
	Started func(id string)
	// Ran is called as soon as the rung returns, before the decision: the
	// CLI flushes its live output there, so that the command's last partial
	// line is shown before an external scorer is waited for.
	Ran func()
}

// Protect returns spec with what every sandbox of this install must not see
// added, once each: the receipt key and netsim's CA dir masked, the store
// (the install's home) hidden whole, and NetCADir set to the home's CA when
// the spec names none. Run protects every spec itself; a caller that
// prepares sandboxes ahead (the daemon's warm pool) protects its template
// the same way, so that a trial's spec and the pool's compare equal.
func (r *Runner) Protect(spec dryexec.TrialSpec) dryexec.TrialSpec {
	return ProtectFor(r.store.Dir(), r.signer.KeyPath(), spec)
}

// ProtectFor is Protect for the install whose home (the store's
// directory) and receipt key are named, before either is open: a caller
// that starts a trial's sandbox while its store and key are still being
// opened (the local engine) protects the spec as Run will.
func ProtectFor(home, keyPath string, spec dryexec.TrialSpec) dryexec.TrialSpec {
	if spec.NetCADir == "" {
		spec.NetCADir = filepath.Join(home, "netsim-ca")
	}
	spec.Masks = appendNew(slices.Clone(spec.Masks), keyPath, spec.NetCADir)
	if abs, err := filepath.Abs(home); err == nil {
		home = abs
	}
	spec.OwnPaths = appendNew(slices.Clone(spec.OwnPaths), home)
	return spec
}

// appendNew appends each of add not already in list.
func appendNew(list []string, add ...string) []string {
	for _, a := range add {
		if !slices.Contains(list, a) {
			list = append(list, a)
		}
	}
	return list
}

// Run runs one trial of spec on rung and returns its delta, decided by engine
// and signed; stored pending unless opt.NoStore. A spec without a TrialID gets
// a new one; its SpillDir defaults to the store's directory. On any error —
// the rung's, the signature's, the store's — nothing of the trial is kept and
// the error is returned as the failing step gave it (errors.Is/As work on
// it): a trial is stored decided and signed, or not at all.
func (r *Runner) Run(ctx context.Context, rung dryexec.Rung, engine *policy.Engine, spec dryexec.TrialSpec, opt Options) (*dryexec.StateDelta, error) {
	if rung == nil || engine == nil {
		return nil, fmt.Errorf("%w: every trial needs a rung and a decision engine", ErrMissing)
	}
	if err := dryexec.CheckImage(rung, spec.Image); err != nil {
		// A rung that cannot start from an image says so, rather than run
		// the command on the host's view.
		return nil, err
	}
	if spec.TrialID == "" {
		spec.TrialID = dryexec.NewTrialID()
	}
	spec = r.Protect(spec)
	if spec.SpillDir == "" {
		// A trial of a million paths keeps its changes in a file there
		// rather than in this process (docs/limits.md, "Big deltas:
		// memory").
		spec.SpillDir = r.store.Dir()
	}
	var rec *store.Trial
	if !opt.NoStore {
		var err error
		if rec, err = r.store.Begin(spec.TrialID); err != nil {
			return nil, err
		}
		if opt.ContentCap != 0 {
			rec.SetTrialCap(opt.ContentCap)
		}
		spec.Blobs, spec.Exchanges = rec, rec
	}
	if opt.Started != nil {
		opt.Started(spec.TrialID)
	}
	d, err := rung.Trial(ctx, spec)
	if opt.Ran != nil {
		opt.Ran()
	}
	if err == nil {
		engine.Apply(ctx, d)
		err = r.signer.Sign(d)
	}
	if err != nil {
		if rec != nil {
			rec.Abort()
		}
		return nil, err
	}
	if rec != nil {
		if err := rec.Save(d); err != nil {
			return nil, err
		}
	}
	return d, nil
}
