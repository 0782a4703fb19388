package linuxns

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dryexec/dryexec"
)

// PoolOptions configure a Pool.
type PoolOptions struct {
	// Size is how many sandboxes are kept ready; 0 means 2.
	Size int
	// IdleTimeout: when no trial has been asked for this long, the ready
	// sandboxes are destroyed and the pool refills only when asked again.
	// 0 means 5 minutes; negative means never.
	IdleTimeout time.Duration
	// Spec is the template of the sandboxes prepared: its limits, masks,
	// upper size and CA dir (and, rootless, its Action.Cwd, which decides
	// which mounts need the caller's own roots). A trial whose spec asks for
	// another sandbox (or network) runs cold, as Rung.Trial would run it.
	// Its command does not matter: each trial brings its own.
	Spec dryexec.TrialSpec
}

// PoolStats say how a Pool has served.
type PoolStats struct {
	Size  int // sandboxes the pool keeps ready when in use
	Ready int // sandboxes ready now
	// Busy counts background work in flight: trials running or their
	// sandboxes being torn down, and a sandbox being prepared.
	Busy   int
	Hits   int // trials that took a ready sandbox
	Misses int // trials that ran cold (none ready, or another sandbox asked for)
	// Failed counts sandboxes that could not be prepared; LastError is the
	// latest reason.
	Failed    int
	LastError string
	// IdlePSSBytes is the proportional memory (Pss) of the ready sandboxes'
	// guest processes together: what keeping them costs. Each also holds a
	// small tmpfs (its upper dirs, empty) and a few host-side descriptors.
	IdlePSSBytes int64
}

// Pool keeps ns sandboxes prepared (namespaces made, overlays mounted and
// pivoted, network device handed over, confinement installed, the guest
// waiting for its command), so that a trial pays only for its command and its
// diff. A sandbox serves one trial and is destroyed after it: nothing a trial
// did (files, environment, processes, network state) can reach another. The
// pool refills in the background.
type Pool struct {
	r    *Rung
	opts PoolOptions

	ctx    context.Context // the refiller's; cancelled by Close
	cancel context.CancelFunc
	wake   chan struct{}
	done   chan struct{}

	teardown sync.WaitGroup // sandboxes used by a trial, being destroyed

	mu      sync.Mutex
	ready   []*trial // oldest first
	closed  bool
	lastUse time.Time
	stats   PoolStats
	busy    int // trials not yet torn down, plus one while preparing
}

var _ dryexec.Rung = (*Pool)(nil)

// Name implements dryexec.Rung: a pool is the ns rung, warm.
func (p *Pool) Name() string { return Name }

// Available implements dryexec.Rung.
func (p *Pool) Available(ctx context.Context) error { return p.r.Available(ctx) }

// ErrPoolClosed is returned by Trial after Close.
var ErrPoolClosed = errors.New("linuxns: pool closed")

// NewPool starts a pool and its refiller; the first sandboxes are prepared in
// the background. The pool lives until Close.
func NewPool(ctx context.Context, r *Rung, opts PoolOptions) (*Pool, error) {
	if opts.Size <= 0 {
		opts.Size = 2
	}
	if opts.IdleTimeout == 0 {
		opts.IdleTimeout = 5 * time.Minute
	}
	opts.Spec = opts.Spec.WithDefaults()
	if opts.Spec.Action.Cwd == "" {
		opts.Spec.Action.Cwd = "/"
	}
	// The template is checked once: a bad one would fail every refill.
	if _, err := sandboxFor(opts.Spec); err != nil {
		return nil, err
	}
	if err := opts.Spec.Limits.Check(); err != nil {
		return nil, err
	}
	p := &Pool{r: r, opts: opts, wake: make(chan struct{}, 1), done: make(chan struct{}), lastUse: time.Now()}
	p.ctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	go p.refill()
	p.poke()
	return p, nil
}

// Trial runs spec in a ready sandbox when one fits, else cold; either way
// the delta is the one Rung.Trial would give.
func (p *Pool) Trial(ctx context.Context, spec dryexec.TrialSpec) (*dryexec.StateDelta, error) {
	spec = spec.WithDefaults()
	if err := checkAction(spec.Action); err != nil {
		return nil, err
	}
	if spec.TrialID == "" {
		spec.TrialID = dryexec.NewTrialID()
	}
	sb, err := sandboxFor(spec)
	if err != nil {
		return nil, err
	}
	p.r.trace("W-sandboxFor")
	t, err := p.take(sb)
	if err != nil {
		return nil, err
	}
	if t == nil {
		if t, err = p.r.prepare(ctx, sb, spec.TrialID); err != nil {
			p.done1()
			p.poke()
			return nil, err
		}
	}
	d, err := t.trial(ctx, spec)
	// The delta is complete (every sandbox process is dead, the upper dirs
	// walked): the sandbox is torn down after the caller has it, and the
	// refill starts after that, so that neither competes with the trial for
	// the CPUs. Close waits for the teardowns.
	go func() {
		defer p.done1()
		t.cleanup()
		p.poke()
	}()
	return d, err
}

// take hands out the oldest ready sandbox built for sb, or nil. Ready
// sandboxes built for another sb are stale (the host's mounts changed since)
// unless the trial asked for something the template does not give; only the
// stale ones are destroyed.
func (p *Pool) take(sb sandbox) (*trial, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrPoolClosed
	}
	// Counted from here, so that Close also waits for this trial's teardown.
	p.teardown.Add(1)
	p.busy++
	p.lastUse = time.Now()
	for i, t := range p.ready {
		if t.sb.equal(sb) {
			p.ready = append(p.ready[:i], p.ready[i+1:]...)
			p.stats.Hits++
			return t, nil
		}
	}
	p.stats.Misses++
	return nil, nil
}

// done1 ends one trial's count in busy and teardown.
func (p *Pool) done1() {
	p.mu.Lock()
	p.busy--
	// Idle time counts from the end of the last trial, not its start.
	p.lastUse = time.Now()
	p.mu.Unlock()
	p.teardown.Done()
}

func (p *Pool) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// refill keeps Size sandboxes ready while the pool is in use, one at a
// time (preparing several at once only competes for the same CPUs), and
// destroys them once it has been idle for IdleTimeout.
func (p *Pool) refill() {
	defer close(p.done)
	backoff := 10 * time.Millisecond
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
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
		sb, err := sandboxFor(p.opts.Spec)
		var t *trial
		if err == nil {
			t, err = p.r.prepare(p.ctx, sb, dryexec.NewTrialID())
		}
		p.mu.Lock()
		p.busy--
		p.mu.Unlock()
		if err != nil {
			p.mu.Lock()
			p.stats.Failed++
			p.stats.LastError = err.Error()
			p.mu.Unlock()
			if p.r.Log != nil {
				p.r.Log.Warn("preparing a pooled sandbox", "err", err)
			}
			// A host that cannot make sandboxes now is not asked again at
			// once; trials meanwhile run cold and report the reason.
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 10 * time.Millisecond
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			t.destroy()
			return
		}
		p.ready = append(p.ready, t)
		// Sandboxes of a template the host has since changed under (its
		// mounts) will never be taken: drop them.
		fresh := p.ready[:0]
		var stale []*trial
		for _, r := range p.ready {
			if r.sb.equal(sb) {
				fresh = append(fresh, r)
			} else {
				stale = append(stale, r)
			}
		}
		p.ready = fresh
		p.mu.Unlock()
		for _, r := range stale {
			r.destroy()
		}
	}
}

// wants says whether the pool is short of ready sandboxes.
func (p *Pool) wants() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closed && len(p.ready) < p.opts.Size
}

// dropIdle destroys every ready sandbox when the pool has been idle for
// IdleTimeout, and then says the pool is idle.
func (p *Pool) dropIdle() bool {
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
		t.destroy()
	}
	return true
}

// Stats reports the pool's figures.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	s := p.stats
	s.Size, s.Ready, s.Busy = p.opts.Size, len(p.ready), p.busy
	pids := make([]int, 0, len(p.ready))
	for _, t := range p.ready {
		pids = append(pids, t.cmd.Process.Pid)
	}
	p.mu.Unlock()
	for _, pid := range pids {
		s.IdlePSSBytes += pss(pid)
	}
	return s
}

// pss is a process's proportional set size in bytes, 0 when unknown.
func pss(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Pss:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// Close destroys the ready sandboxes, stops refilling and waits until every
// used sandbox is torn down; trials running now finish. Later trials get
// ErrPoolClosed.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	drop := p.ready
	p.ready = nil
	p.mu.Unlock()
	p.cancel()
	<-p.done
	for _, t := range drop {
		t.destroy()
	}
	p.teardown.Wait()
	return nil
}
