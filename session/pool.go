package session

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/warm"
)

// PoolOptions configure a Pool.
type PoolOptions struct {
	// Size is how many sessions are kept open and unused; 0 means 2.
	Size int
	// IdleTimeout: after this long without an Open, the unused sessions are
	// closed and the pool refills on the next Open. 0 means 5 minutes;
	// negative, never.
	IdleTimeout time.Duration
	// Template is what the pooled sessions are opened with. An Open whose
	// options differ from it in anything but HostObjects, Allow, OnEmit and
	// Log gets a session of its own, opened then.
	Template Options
	// Background, when set, is called as each session's opening starts and
	// the function it returns as it ends (dryexec.PoolOptions.Background).
	Background func() (done func())
}

// Pool keeps sessions open ahead of their use (guest started, view built,
// netsim serving, shell environment set), so that Open returns at once. A
// pooled session has run nothing when it is handed out, and is handed out
// once: it is the caller's to close, like one from Open.
type Pool struct {
	opts PoolOptions
	w    *warm.Pool[pooled]
}

// pooled is a ready session and what of the host it was made from.
type pooled struct {
	s   *Session
	key string
}

// NewPool starts a pool; the first sessions open in the background.
func NewPool(ctx context.Context, opts PoolOptions) *Pool {
	opts.Template = opts.Template.withDefaults()
	p := &Pool{opts: opts}
	p.w = warm.New(ctx, warm.Options{Size: opts.Size, IdleTimeout: opts.IdleTimeout, Log: opts.Template.Log, Background: opts.Background}, warm.Funcs[pooled]{
		Prepare: func(ctx context.Context) (pooled, error) {
			s, err := open(ctx, p.opts.Template)
			if err != nil {
				return pooled{}, err
			}
			// After open, which makes what it masks (netsim's CA) first.
			key, err := sandboxKey(ctx, p.opts.Template)
			if err != nil {
				s.Close()
				return pooled{}, err
			}
			return pooled{s, key}, nil
		},
		Destroy: func(ps pooled) { ps.s.Close() },
		Same:    func(a, b pooled) bool { return a.key == b.key },
		// A session whose guest died while it waited (killed, the OOM
		// killer) is passed over and replaced: handed out, its Open failed.
		Alive: func(ps pooled) bool { return !ps.s.gone.Load() },
	})
	return p
}

// Open returns a pooled session when opt is the template's (and the host's
// mounts and masks are still what the session was built from), else opens
// one as Open does.
func (p *Pool) Open(ctx context.Context, opt Options) (*Session, error) {
	opt = opt.withDefaults()
	hostObjects, err := newHostObjects(opt.HostObjects, opt.Allow)
	if err != nil {
		return nil, err
	}
	s, err := p.take(ctx, opt)
	if err != nil {
		return nil, err
	}
	s.bind(hostObjects, opt.OnEmit)
	if err := s.configure(opt); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// take hands out a ready session when opt (with its defaults) is the
// template's and the host's mounts and masks are still what it was built
// from, else opens one; either way, neither bound nor configured.
func (p *Pool) take(ctx context.Context, opt Options) (*Session, error) {
	var key string
	var err error
	fits := sameOptions(opt, p.opts.Template)
	if fits {
		if key, err = sandboxKey(ctx, opt); err != nil {
			return nil, err
		}
	}
	ps, ok, err := p.w.Take(func(ps pooled) bool { return fits && ps.key == key })
	if err != nil {
		return nil, err
	}
	// A session lives long: its use ends when it is handed out.
	defer p.w.Done()
	if ok {
		return ps.s, nil
	}
	if fits {
		// The template's own shape, and no ready session fits: they were
		// opened before the host changed (a mask, a mount) and would never
		// fit again, while a full pool opens no new one by itself. They
		// are replaced now (linuxns.Pool does the same for trials).
		p.w.Stale(func(ps pooled) bool { return ps.key != key })
	}
	return open(ctx, opt)
}

// sameOptions says whether a session opened with a would be one opened with
// b, the caller's objects and callbacks aside.
func sameOptions(a, b Options) bool {
	return a.Rung == b.Rung && a.Workspace == b.Workspace && maps.Equal(a.Env, b.Env) && a.Shell == b.Shell &&
		a.OutputCap == b.OutputCap && a.GuestExe == b.GuestExe && a.CacheReadOnly == b.CacheReadOnly && a.PythonWarm == b.PythonWarm &&
		a.Limits == b.Limits && slices.Equal(a.Masks, b.Masks) && a.NoDefaultMasks == b.NoDefaultMasks &&
		slices.Equal(a.OwnPaths, b.OwnPaths) &&
		a.Cgroups == b.Cgroups && slices.Equal(a.Net, b.Net) && a.NetCADir == b.NetCADir && a.Image == nil && b.Image == nil
}

// Stats reports the pool's figures.
func (p *Pool) Stats() warm.Stats { return p.w.Stats() }

// Close closes the unused sessions; sessions handed out are their owners'.
func (p *Pool) Close() { p.w.Close() }

// keyer is a rung whose sandboxes are built from the host's state (its
// mounts, its masked paths): SandboxKey says what a sandbox opened now for
// spec would be built from, and a pooled one made from another is stale.
type keyer interface {
	SandboxKey(spec dryexec.SandboxSpec) (string, error)
}

// sandboxKey is opt's rung's key of a sandbox opened now with opt ("" for a
// rung whose sandboxes do not depend on the host's state).
func sandboxKey(ctx context.Context, opt Options) (string, error) {
	sr, err := sessionRung(ctx, opt)
	if err != nil {
		return "", err
	}
	k, ok := sr.(keyer)
	if !ok {
		return "", nil
	}
	return k.SandboxKey(sandboxSpec(opt))
}
