package maxprocs

import (
	"runtime"
	"slices"
	"sync"
	"testing"
)

// recorder is a fake runtime.GOMAXPROCS that keeps what it was given.
type recorder struct {
	mu  sync.Mutex
	got []int
	cur int
}

func (r *recorder) set(n int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := r.cur
	r.got = append(r.got, n)
	r.cur = n
	return prev
}

// last is the value set was last given.
func (r *recorder) last() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur
}

func TestGovernor(t *testing.T) {
	// Each step begins a piece of work (its weight) or ends the one an
	// earlier step began (that step's index).
	type step struct {
		begin int // weight to begin; 0 for an end
		end   int // index of the step whose work ends
	}
	b := func(w int) step { return step{begin: w} }
	e := func(i int) step { return step{end: i} }
	for _, tc := range []struct {
		name  string
		full  int
		steps []step
		want  []int // every value given to set, in order
	}{
		{"idle: one at once", 4, nil, []int{1}},
		{"one request stays at one", 4, []step{b(Request), e(0)}, []int{1}},
		{"two requests: every CPU, then back", 4, []step{b(Request), b(Request), e(0), e(1)}, []int{1, 4, 1}},
		{"a preparation alone: every CPU", 2, []step{b(Background), e(0)}, []int{1, 2, 1}},
		{"a request during a preparation: no change at its start or end", 2,
			[]step{b(Background), b(Request), e(1), e(0)}, []int{1, 2, 1}},
		{"a preparation during a request, ending first", 2,
			[]step{b(Request), b(Background), e(1), e(0)}, []int{1, 2, 1}},
		{"one CPU: never touched", 1, []step{b(Request), b(Background), e(1), e(0)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{cur: tc.full}
			g := New(tc.full, r.set)
			ends := make([]func(), len(tc.steps))
			for i, s := range tc.steps {
				if s.begin != 0 {
					ends[i] = g.Begin(s.begin)
				} else {
					ends[s.end]()
				}
			}
			if !slices.Equal(r.got, tc.want) {
				t.Fatalf("set got %v, want %v", r.got, tc.want)
			}
		})
	}
}

// TestGovernorEndTwice: an end called twice ends its work once; the second
// call must not take the load below what runs.
func TestGovernorEndTwice(t *testing.T) {
	r := &recorder{cur: 2}
	g := New(2, r.set)
	first := g.Begin(Request)
	second := g.Begin(Request) // 2 in flight: every CPU
	first()
	first() // were it counted again, the load would drop to 0 and set 1
	if got := r.last(); got != 1 {
		t.Fatalf("after one of two requests ended (its end called twice): %d, want 1 (one request left)", got)
	}
	third := g.Begin(Request)
	if got := r.last(); got != 2 {
		t.Fatalf("two requests in flight: %d, want 2", got)
	}
	second()
	third()
}

// TestGovernorConcurrent: work begun and ended from many goroutines leaves
// the setting consistent with what runs (race detector on), and the real
// runtime.GOMAXPROCS follows.
func TestGovernorConcurrent(t *testing.T) {
	full := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(full)
	if full < 2 {
		full = 2 // the runtime accepts more Ps than CPUs
	}
	g := New(full, runtime.GOMAXPROCS)
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Fatalf("idle: GOMAXPROCS %d, want 1", got)
	}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			for range 50 {
				w := Request
				if i%4 == 0 {
					w = Background
				}
				g.Begin(w)()
			}
		})
	}
	wg.Wait()
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Fatalf("all work ended: GOMAXPROCS %d, want 1", got)
	}
	end := g.Begin(Background)
	if got := runtime.GOMAXPROCS(0); got != full {
		t.Fatalf("background work: GOMAXPROCS %d, want %d", got, full)
	}
	end()
}
