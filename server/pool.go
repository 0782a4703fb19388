package server

import (
	"context"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/rung"
)

// poolRung is the rung whose warm pool serves the daemon's default trials.
const poolRung = "ns"

// newPool starts a warm pool of size of name's sandboxes for trials shaped
// like template, if that rung keeps pools (dryexec.Pooler).
func newPool(ctx context.Context, cfg Config, name string, size int, template dryexec.TrialSpec) (dryexec.Pool, error) {
	r, err := rung.Open(ctx, name, rung.Config{GuestExe: cfg.GuestExe, Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	p, ok := r.(dryexec.Pooler)
	if !ok {
		return nil, &dryexec.IsolationUnavailableError{Rung: r.Name(), Missing: "a warm pool (this rung keeps none)"}
	}
	return p.NewPool(ctx, dryexec.PoolOptions{Size: size, IdleTimeout: cfg.PoolIdle, Spec: template, Background: cfg.background})
}

// background is Busy for work beside the requests: a pool's preparation,
// an image made ready.
func (c Config) background() (done func()) {
	if c.Busy == nil {
		return func() {}
	}
	return c.Busy(true)
}

// poolStats reports the warm pool's figures for /v1/health (nil: no pool).
func poolStats(p dryexec.Pool) any {
	if p == nil {
		return nil
	}
	st := p.Stats()
	return map[string]any{"size": st.Size, "ready": st.Ready, "settled": st.Settled, "busy": st.Busy, "hits": st.Hits, "misses": st.Misses,
		"failed": st.Failed, "last_error": st.LastError, "idle_pss_bytes": st.IdlePSSBytes}
}

// nsAvailable says whether ns sandboxes can be made here.
func nsAvailable(ctx context.Context) error {
	_, err := rung.Select(ctx, poolRung)
	return err
}
