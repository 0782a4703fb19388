package linuxns

import (
	"context"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/procfs"
	"github.com/dryexec/dryexec/internal/warm"
)

// PoolOptions configure a Pool. Spec's Action.Cwd matters rootless: it
// decides which mounts need the caller's own roots.
type PoolOptions = dryexec.PoolOptions

// PoolStats say how a Pool has served.
type PoolStats = dryexec.PoolStats

// Pool keeps ns sandboxes prepared (namespaces made, overlays mounted and
// pivoted, network device handed over, confinement installed, the guest
// waiting for its command), so that a trial pays only for its command and its
// diff. A sandbox serves one trial and is destroyed after it: nothing a trial
// did (files, environment, processes, network state) can reach another. The
// pool refills in the background (package warm).
type Pool struct {
	r    *Rung
	opts PoolOptions
	w    *warm.Pool[*trial]
	host *hostCache // the host's mounts and masks, looked at again when they change
}

var (
	_ dryexec.Pool   = (*Pool)(nil)
	_ dryexec.Pooler = (*Rung)(nil)
)

// NewPool implements dryexec.Pooler (see the function NewPool).
func (r *Rung) NewPool(ctx context.Context, opts dryexec.PoolOptions) (dryexec.Pool, error) {
	return NewPool(ctx, r, opts)
}

// Name implements dryexec.Rung: a pool is the ns rung, warm.
func (p *Pool) Name() string { return Name }

// Available implements dryexec.Rung.
func (p *Pool) Available(ctx context.Context) error { return p.r.Available(ctx) }

// ErrPoolClosed is returned by Trial after Close.
var ErrPoolClosed = warm.ErrClosed

// NewPool starts a pool and its refiller; the first sandboxes are prepared in
// the background. The pool lives until Close.
func NewPool(ctx context.Context, r *Rung, opts PoolOptions) (*Pool, error) {
	opts.Spec = opts.Spec.WithDefaults()
	if opts.Spec.Action.Cwd == "" {
		opts.Spec.Action.Cwd = "/"
	}
	// The template is checked once: a bad one would fail every refill.
	if _, err := sandboxFor(opts.Spec, nil); err != nil {
		return nil, err
	}
	if err := opts.Spec.Limits.Check(); err != nil {
		return nil, err
	}
	p := &Pool{r: r, opts: opts, host: newHostCache()}
	p.w = warm.New(ctx, warm.Options{Size: opts.Size, IdleTimeout: opts.IdleTimeout, Log: r.Log, Background: opts.Background}, warm.Funcs[*trial]{
		Prepare: func(ctx context.Context) (*trial, error) {
			// Each refill recomputes the template's sandbox: the host's
			// mounts come and go, and older sandboxes are then stale.
			sb, err := sandboxFor(p.opts.Spec, p.host)
			if err != nil {
				return nil, err
			}
			t, err := p.r.prepare(ctx, sb, dryexec.NewTrialID(), nil, true)
			if err == nil {
				t.awaitStub()
				t.watchGuest()
			}
			return t, err
		},
		Destroy: (*trial).cleanup,
		Alive:   (*trial).alive,
		Same:    func(a, b *trial) bool { return a.sb.equal(b.sb) },
	})
	return p, nil
}

// Trial runs spec in a ready sandbox when one fits, else cold; either way
// the delta is the one Rung.Trial would give.
func (p *Pool) Trial(ctx context.Context, spec dryexec.TrialSpec) (*dryexec.StateDelta, error) {
	spec, sb, err := checkSpec(spec, p.host)
	if err != nil {
		return nil, err
	}
	t, ok, err := p.w.Take(func(t *trial) bool { return t.sb.equal(sb) })
	if err != nil {
		return nil, err
	}
	if !ok {
		// A request shaped as the pool's template that no ready sandbox
		// fits means the host changed since they were made (a mask or a
		// mount that appeared, a daemon's socket made after its first
		// sandboxes): they would never fit again, and a full pool makes no
		// new one by itself. They are replaced now, so that this request
		// is the only one to run cold.
		if tsb, err := sandboxFor(p.opts.Spec, p.host); err == nil && tsb.equal(sb) {
			p.w.Stale(func(t *trial) bool { return !t.sb.equal(sb) })
		}
		if t, err = p.r.prepare(ctx, sb, spec.TrialID, nil, false); err != nil {
			p.w.Done()
			return nil, err
		}
	}
	d, err := t.trial(ctx, spec)
	// The delta is complete (every sandbox process is dead, the upper dirs
	// walked): the sandbox is torn down after the caller has it, and the
	// refill starts after that, so that neither competes with the trial for
	// the CPUs. Close waits for the teardowns.
	go func() {
		defer p.w.Done()
		t.cleanup()
	}()
	return d, err
}

// Stats reports the pool's figures.
func (p *Pool) Stats() PoolStats {
	w := p.w.Stats()
	s := PoolStats{Size: w.Size, Ready: w.Ready, Busy: w.Busy, Hits: w.Hits, Misses: w.Misses, Failed: w.Failed, LastError: w.LastError}
	var pids []int
	p.w.Each(func(t *trial) {
		pids = append(pids, t.cmd.Process.Pid)
		if t.settled() {
			s.Settled++
		}
	})
	for _, pid := range pids {
		_, pss := procfs.Rollup(pid)
		s.IdlePSSBytes += pss
	}
	return s
}

// Close destroys the ready sandboxes, stops refilling and waits until every
// used sandbox is torn down; trials running now finish. Later trials get
// ErrPoolClosed.
func (p *Pool) Close() error {
	p.w.Close()
	p.host.close()
	return nil
}
