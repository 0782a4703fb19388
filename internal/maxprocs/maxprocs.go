// Package maxprocs owns the daemon's GOMAXPROCS: one while it serves a
// single request and prepares nothing in the background, all of them as
// soon as there is more to do.
//
// Why: a trial through the daemon is a chain of hand-offs (the request read,
// the command written to the sandbox, its exit and report read back, the
// decision, the signature, the record, the answer) with little computing
// between them. With a second P idle, each goroutine made runnable on the way
// wakes another thread, which spins looking for work on the other CPU,
// often takes the goroutine there (its caches cold, the CPU just woken from
// halt) and, on a small machine, competes with the sandbox's own processes.
// On the project's 2-CPU VM a daemon held at one P answered `dryexec run --
// /bin/true` 0.2–0.45 ms sooner (medians of 200 alternated runs, every pair
// of six), 7–9 % of the whole. A daemon held at one P is slower when work
// overlaps (a pool's refill beside the next trial, concurrent trials hashing
// what they wrote), so any of that brings every CPU back. docs/architecture.md,
// "The daemon's GOMAXPROCS".
package maxprocs

import "sync"

// Weights of the work a Governor is told of.
const (
	// Request is one request being served: alone, it runs at one P.
	Request = 1
	// Background is work beside the requests (a sandbox a pool prepares, an
	// image being pulled): it runs at every P, and so does any request
	// beside it.
	Background = 2
)

// Governor sets GOMAXPROCS from the work in progress: one while the sum of
// the weights of what runs is below 2 (nothing, or one request), Full
// otherwise. It changes the setting only on a crossing, never twice for the
// same state: each change stops the world for ≈ 20 µs.
type Governor struct {
	set  func(int) int // runtime.GOMAXPROCS
	full int

	mu   sync.Mutex
	load int // sum of the weights begun and not ended
	cur  int // what set was last given
}

// New returns a Governor that gives set (runtime.GOMAXPROCS, or a fake in
// tests) full or 1. It sets 1 at once: nothing runs yet. A full of 1 or less
// leaves the setting alone.
func New(full int, set func(int) int) *Governor {
	g := &Governor{set: set, full: full, cur: full}
	g.mu.Lock()
	g.apply()
	g.mu.Unlock()
	return g
}

// Begin records work of weight w (Request or Background) until the
// returned function is called, which must be called once.
func (g *Governor) Begin(w int) (end func()) {
	g.mu.Lock()
	g.load += w
	g.apply()
	g.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			g.load -= w
			g.apply()
			g.mu.Unlock()
		})
	}
}

// apply sets GOMAXPROCS for g.load; g.mu is held, so that two crossings
// cannot apply out of order.
func (g *Governor) apply() {
	if g.full <= 1 {
		return
	}
	want := 1
	if g.load >= 2 {
		want = g.full
	}
	if want != g.cur {
		g.set(want)
		g.cur = want
	}
}
