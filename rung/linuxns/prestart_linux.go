package linuxns

import (
	"context"
	"sync"

	"github.com/dryexec/dryexec"
)

// Prestarted is a pool of one that never refills: one sandbox prepared for
// a trial whose spec is known before the caller's own preparations are
// done. The local engine (`dryexec run` without a daemon) knows its spec
// right after reading its arguments, and then opens the store, loads the
// receipt key and compiles the policy, ≈ 5 ms that wait on the file system
// more than they compute: started first, the sandbox's guest starts and
// builds the view beside them, on the other CPU, where a cold Trial would
// start it only after them.
//
// Its Trial runs a spec that needs that very sandbox (the same
// dryexec.TrialSpec.TrialID, which names the sandbox's cgroup and seeds its
// mocks, and the same view, masks, limits and network) in it, once, and
// returns with the delta while the sandbox is torn down; any other spec,
// or any later trial, runs cold. The delta is Rung.Trial's either way.
// Close tears down a sandbox no trial took, and returns once no sandbox of
// its is left.
type Prestarted struct {
	r      *Rung
	ready  chan struct{} // closed once prepare has returned
	t      *trial        // prepare's sandbox; nil once taken, or if it failed
	mu     sync.Mutex
	taken  bool // Trial or Close took the sandbox
	hit    bool // a trial ran in it
	missed int  // trials that ran cold
	// teardown is the used sandbox's teardown, which Close waits for.
	teardown sync.WaitGroup
}

var (
	_ dryexec.Pool      = (*Prestarted)(nil)
	_ dryexec.ImageRung = (*Prestarted)(nil)
)

// Prestart starts preparing a sandbox for spec (its TrialID set: see
// Prestarted) and returns at once. A spec the rung refuses gives a
// Prestarted whose Trial runs cold, and so reports the refusal itself.
func (r *Rung) Prestart(ctx context.Context, spec dryexec.TrialSpec) dryexec.Pool {
	p := &Prestarted{r: r, ready: make(chan struct{})}
	spec, sb, err := checkBase(spec)
	if err != nil || spec.TrialID == "" {
		close(p.ready)
		return p
	}
	go func() {
		defer close(p.ready)
		// A failed preparation leaves nothing (prepare cleans up) and the
		// trial runs cold, to fail there with the same error or not at all.
		p.t, _ = r.prepare(ctx, sb, spec.TrialID, viewOf(spec, nil), false)
	}()
	return p
}

// Name implements dryexec.Rung.
func (p *Prestarted) Name() string { return Name }

// Available implements dryexec.Rung.
func (p *Prestarted) Available(ctx context.Context) error { return p.r.Available(ctx) }

// SupportsImages implements dryexec.ImageRung, as the rung does.
func (p *Prestarted) SupportsImages() bool { return p.r.SupportsImages() }

// take returns the prepared sandbox the first time it is called (once its
// preparation has ended; nil if it failed), nil afterwards.
func (p *Prestarted) take() *trial {
	p.mu.Lock()
	if p.taken {
		p.mu.Unlock()
		return nil
	}
	p.taken = true
	p.mu.Unlock()
	<-p.ready
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.t
	p.t = nil
	return t
}

// Trial implements dryexec.Rung: spec runs in the prepared sandbox when it
// needs that one, else cold.
//
// What spec needs is worked out afresh (the mount table, the masks: ≈ 2–3
// ms here) before waiting for the preparation, not after it: the two then
// overlap, where the check used to come between the sandbox's readiness
// and the command. It makes no difference to what the check catches: the
// masks are those of the host as it is when Trial is called, as a cold
// trial's are those of its start.
func (p *Prestarted) Trial(ctx context.Context, spec dryexec.TrialSpec) (*dryexec.StateDelta, error) {
	checked, sb, err := checkSpec(spec, nil)
	t := p.take()
	if t != nil && (err != nil || t.id != checked.TrialID || !t.sb.equal(sb)) {
		t.cleanup()
		t = nil
	}
	if t == nil {
		p.mu.Lock()
		p.missed++
		p.mu.Unlock()
		return p.r.Trial(ctx, spec)
	}
	p.mu.Lock()
	p.hit = true
	p.mu.Unlock()
	d, err := t.trial(ctx, checked)
	// The delta is complete (every sandbox process is dead, the upper dirs
	// walked): as a pool's, the sandbox is torn down after the caller has
	// it (the guest reaped, its cgroups removed: ≈ 3 ms here), beside what
	// the caller does with the delta; Close waits for it.
	p.teardown.Go(t.cleanup)
	return d, err
}

// Stats implements dryexec.Pool.
func (p *Prestarted) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := PoolStats{Size: 1, Misses: p.missed}
	if p.hit {
		s.Hits = 1
	}
	if !p.taken {
		select {
		case <-p.ready:
			if p.t != nil {
				s.Ready = 1 // not Settled: the trial itself reads trial.ready
			}
		default:
			s.Busy = 1
		}
	}
	return s
}

// Close implements dryexec.Pool: it tears down the sandbox if no trial
// took it (waiting for its preparation to end first), and returns once
// the sandbox is gone, whether a trial used it or not.
func (p *Prestarted) Close() error {
	if t := p.take(); t != nil {
		t.cleanup()
	}
	p.teardown.Wait()
	return nil
}
