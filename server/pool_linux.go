package server

import (
	"context"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/rung/linuxns"
)

// newPool starts the warm pool of ns sandboxes for trials shaped like
// template.
func newPool(ctx context.Context, cfg Config, template dryexec.TrialSpec) (trialPool, error) {
	r := &linuxns.Rung{GuestExe: cfg.GuestExe, Log: cfg.Log}
	if err := r.Available(ctx); err != nil {
		return nil, err
	}
	return linuxns.NewPool(ctx, r, linuxns.PoolOptions{Size: cfg.Pool, IdleTimeout: cfg.PoolIdle, Spec: template})
}
