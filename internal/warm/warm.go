// Package warm owns the bookkeeping of a warm pool: things that are slow to
// make (a prepared sandbox, a started session) are made ahead, in the
// background, one at a time, handed out once each, and destroyed when stale,
// idle or the pool closes. What the things are, how they are made and when
// one fits a request is the caller's (linuxns.Pool, session.Pool).
package warm

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// ErrClosed is returned by Take after Close.
var ErrClosed = errors.New("warm pool closed")

// Options configure a Pool.
type Options struct {
	// Size is how many things are kept ready; 0 means 2.
	Size int
	// IdleTimeout: once nothing has been taken for this long (counted from
	// the end of the last use), the ready things are destroyed and the pool
	// refills only when asked again. 0 means 5 minutes; negative, never.
	IdleTimeout time.Duration
	// Log receives a record for each failed preparation; nil logs nothing.
	Log *slog.Logger
	// Background, when set, is called as each preparation starts and the
	// function it returns as it ends (dryexec.PoolOptions.Background).
	Background func() (done func())
}

// Funcs are what the pool does with its things.
type Funcs[T any] struct {
	// Prepare makes one ready thing.
	Prepare func(ctx context.Context) (T, error)
	// Destroy ends a thing that will never be handed out.
	Destroy func(T)
	// Same says whether two things were made for the same request. After
	// each preparation, ready things not the same as the new one are stale
	// (what they were made from has changed) and destroyed.
	Same func(a, b T) bool
	// Alive, when set, says whether a ready thing can still serve (a VM
	// whose process was killed cannot). A dead thing is never handed out:
	// Take passes over it, and it is destroyed and replaced, at the latest
	// on the refiller's next tick (a second). Nil: things do not die.
	Alive func(T) bool
}

// Stats say how a Pool has served.
type Stats struct {
	Size  int // things kept ready when in use
	Ready int // ready now
	// Busy counts work in flight: things taken and not yet given back with
	// Done, and one while a thing is being prepared.
	Busy   int
	Hits   int // Takes that got a ready thing
	Misses int // Takes that did not
	// Failed counts failed preparations; LastError is the latest reason.
	Failed    int
	LastError string
	// Died counts ready things found dead (Funcs.Alive) or marked stale
	// (Stale) and replaced.
	Died int
}

// Pool keeps things ready. Its methods may be called from several goroutines.
type Pool[T any] struct {
	opts Options
	fn   Funcs[T]

	ctx    context.Context // the refiller's; cancelled by Close
	cancel context.CancelFunc
	wake   chan struct{}
	done   chan struct{}
	inUse  sync.WaitGroup // Takes not yet Done

	mu      sync.Mutex
	ready   []T // oldest first
	dead    []T // found dead (Funcs.Alive), to be destroyed by the refiller
	closed  bool
	lastUse time.Time
	busy    int
	stats   Stats
}

// New starts a pool and its refiller; the first things are prepared in the
// background. The pool lives until Close.
func New[T any](ctx context.Context, opts Options, fn Funcs[T]) *Pool[T] {
	if opts.Size <= 0 {
		opts.Size = 2
	}
	if opts.IdleTimeout == 0 {
		opts.IdleTimeout = 5 * time.Minute
	}
	p := &Pool[T]{opts: opts, fn: fn, wake: make(chan struct{}, 1), done: make(chan struct{}), lastUse: time.Now()}
	p.ctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	go p.refill()
	p.poke()
	return p
}

// Take hands out the oldest ready thing that fits, or reports none (ok
// false): the caller then makes one itself. Either way, unless it returns an
// error, the caller must call Done once it has finished with the request
// (and destroyed the thing): the refill waits for that, so that it does not
// compete with the request for the CPUs, and Close waits for it too.
func (p *Pool[T]) Take(fits func(T) bool) (t T, ok bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return t, false, ErrClosed
	}
	p.inUse.Add(1)
	p.busy++
	p.lastUse = time.Now()
	if p.takeDeadLocked() {
		// The refiller destroys them (and replaces them) at once.
		p.poke()
	}
	for i, r := range p.ready {
		if fits(r) {
			p.ready = append(p.ready[:i], p.ready[i+1:]...)
			p.stats.Hits++
			return r, true, nil
		}
	}
	p.stats.Misses++
	return t, false, nil
}

// Stale passes the ready things for which stale says so to the refiller,
// which destroys and replaces them at once, as it does dead ones; it returns
// how many. A full pool prepares nothing by itself, so a thing made for a
// world that has since changed (what Funcs.Same compares) would stay ready,
// and never fit, until the pool went idle: a caller whose request missed
// for that reason says so here.
func (p *Pool[T]) Stale(stale func(T) bool) int {
	p.mu.Lock()
	n := p.retireLocked(stale)
	p.mu.Unlock()
	if n > 0 {
		p.poke()
	}
	return n
}

// retireLocked moves the ready things gone says so of to p.dead, for the
// refiller to destroy and replace, and returns how many.
func (p *Pool[T]) retireLocked(gone func(T) bool) int {
	n := len(p.dead)
	p.ready = slices.DeleteFunc(p.ready, func(r T) bool {
		if !gone(r) {
			return false
		}
		p.dead = append(p.dead, r)
		return true
	})
	return len(p.dead) - n
}

// takeDeadLocked moves the ready things that Alive says are dead to
// p.dead, for the refiller to destroy, and says whether there were any.
func (p *Pool[T]) takeDeadLocked() bool {
	if p.fn.Alive == nil {
		return false
	}
	return p.retireLocked(func(r T) bool { return !p.fn.Alive(r) }) > 0
}

// dropDead destroys the dead things Take or a tick found.
func (p *Pool[T]) dropDead() {
	p.mu.Lock()
	p.takeDeadLocked()
	dead := p.dead
	p.dead = nil
	p.stats.Died += len(dead)
	p.mu.Unlock()
	for _, t := range dead {
		p.fn.Destroy(t)
	}
}

// Done ends one Take's use and lets the pool refill.
func (p *Pool[T]) Done() {
	p.mu.Lock()
	p.busy--
	// Idle time counts from the end of the last use, not its start.
	p.lastUse = time.Now()
	p.mu.Unlock()
	p.inUse.Done()
	p.poke()
}

func (p *Pool[T]) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// prepare makes one thing, told to Options.Background.
func (p *Pool[T]) prepare() (T, error) {
	if p.opts.Background != nil {
		defer p.opts.Background()()
	}
	return p.fn.Prepare(p.ctx)
}

// refill keeps Size things ready while the pool is in use, one at a time
// (preparing several at once only competes for the same CPUs), and destroys
// them once it has been idle for IdleTimeout.
func (p *Pool[T]) refill() {
	defer close(p.done)
	backoff := 10 * time.Millisecond
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		p.dropDead()
		if p.dropIdle() || !p.wants() {
			select {
			case <-p.ctx.Done():
				return
			case <-p.wake:
			case <-tick.C:
			}
			continue
		}
		p.mu.Lock()
		p.busy++
		p.mu.Unlock()
		t, err := p.prepare()
		p.mu.Lock()
		p.busy--
		if err != nil && p.ctx.Err() != nil {
			// The pool is closing: a preparation it cut short is not a
			// failure of the host (and no warning at every clean exit).
			p.mu.Unlock()
			return
		}
		if err != nil {
			p.stats.Failed++
			p.stats.LastError = err.Error()
			p.mu.Unlock()
			if p.opts.Log != nil {
				p.opts.Log.Warn("preparing a pooled sandbox", "err", err)
			}
			// A host that cannot make sandboxes now is not asked again at
			// once; requests meanwhile go cold and report the reason.
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 10 * time.Millisecond
		if p.closed {
			p.mu.Unlock()
			p.fn.Destroy(t)
			return
		}
		fresh := []T{t}
		var stale []T
		for _, r := range p.ready {
			if p.fn.Same(r, t) {
				fresh = append(fresh, r)
			} else {
				stale = append(stale, r)
			}
		}
		// Oldest first, the new one last.
		p.ready = append(fresh[1:], t)
		p.mu.Unlock()
		for _, r := range stale {
			p.fn.Destroy(r)
		}
	}
}

// wants says whether the pool is short of ready things.
func (p *Pool[T]) wants() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closed && len(p.ready) < p.opts.Size
}

// dropIdle destroys every ready thing when the pool has been idle for
// IdleTimeout, and then says the pool is idle.
func (p *Pool[T]) dropIdle() bool {
	if p.opts.IdleTimeout < 0 {
		return false
	}
	p.mu.Lock()
	if p.busy > 0 || time.Since(p.lastUse) < p.opts.IdleTimeout {
		p.mu.Unlock()
		return false
	}
	drop := p.ready
	p.ready = nil
	p.mu.Unlock()
	for _, t := range drop {
		p.fn.Destroy(t)
	}
	return true
}

// Stats reports the pool's figures.
func (p *Pool[T]) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Size, s.Ready, s.Busy = p.opts.Size, len(p.ready), p.busy
	return s
}

// Each calls f with each ready thing, under the pool's lock (keep f short).
func (p *Pool[T]) Each(f func(T)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range p.ready {
		f(t)
	}
}

// Close destroys the ready things, stops refilling and waits until every
// Take has its Done. Later Takes get ErrClosed.
func (p *Pool[T]) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	drop := append(p.ready, p.dead...)
	p.ready, p.dead = nil, nil
	p.mu.Unlock()
	p.cancel()
	<-p.done
	// What the refiller found dead meanwhile is destroyed here too.
	p.mu.Lock()
	drop = append(drop, p.dead...)
	p.dead = nil
	p.mu.Unlock()
	for _, t := range drop {
		p.fn.Destroy(t)
	}
	p.inUse.Wait()
}
