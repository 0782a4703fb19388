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

// poolStats reports the warm pool's figures for /v1/health (nil: no pool).
func poolStats(p trialPool) any {
	lp, ok := p.(*linuxns.Pool)
	if !ok {
		return nil
	}
	st := lp.Stats()
	return map[string]any{"size": st.Size, "ready": st.Ready, "busy": st.Busy, "hits": st.Hits, "misses": st.Misses,
		"failed": st.Failed, "last_error": st.LastError, "idle_pss_bytes": st.IdlePSSBytes}
}

// nsAvailable says whether ns sandboxes can be made here.
func nsAvailable(ctx context.Context) error { return (&linuxns.Rung{}).Available(ctx) }
