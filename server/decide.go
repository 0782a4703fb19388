package server

import (
	"context"
	"errors"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/policy"
	"github.com/dryexec/dryexec/receipt"
)

// PolicyDecider is Config.Decide as `dryexec run` decides: the policy engine
// (a request's policy document on top of policy.Default, else base), then the
// install's receipt key (kept in storeDir) signs the delta with its decision.
// DECISION ENGINE CALL SITE (issue #7): keep in step with internal/cli's run.
func PolicyDecider(storeDir string, base policy.Policy) (func([]byte) (func(context.Context, *dryexec.StateDelta) error, error), error) {
	signer, err := receipt.LoadOrCreate(storeDir)
	if err != nil {
		return nil, err
	}
	baseEngine, err := policy.Compile(base)
	if err != nil {
		return nil, err
	}
	return func(doc []byte) (func(context.Context, *dryexec.StateDelta) error, error) {
		eng := baseEngine
		if doc != nil {
			p, err := policy.Parse(doc)
			if err != nil {
				return nil, err
			}
			// A scorer runs a command or calls a URL from the host, outside
			// any sandbox: a request may not bring its own.
			if p.Scorer != nil {
				return nil, errors.New("a request's policy may not name a scorer (it would run on the host, unsandboxed); set it in the daemon's --policy")
			}
			if eng, err = policy.Compile(p); err != nil {
				return nil, err
			}
		}
		return func(ctx context.Context, d *dryexec.StateDelta) error {
			eng.Apply(ctx, d)
			return signer.Sign(d)
		}, nil
	}, nil
}
