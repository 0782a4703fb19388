package warm

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/testwait"
)

// thing is what the tests pool: a generation (what it was made from) and an
// id; made and destroyed are counted so that leaks and double destroys show.
type thing struct{ gen, id int }

type maker struct {
	mu        sync.Mutex
	gen, next int
	fail      error
	made      int
	destroyed map[int]int
}

func (m *maker) funcs() Funcs[thing] {
	return Funcs[thing]{
		Prepare: func(context.Context) (thing, error) {
			m.mu.Lock()
			defer m.mu.Unlock()
			if m.fail != nil {
				return thing{}, m.fail
			}
			m.next++
			m.made++
			return thing{gen: m.gen, id: m.next}, nil
		},
		Destroy: func(t thing) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.destroyed[t.id]++
		},
		Same: func(a, b thing) bool { return a.gen == b.gen },
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	testwait.For(t, 10*time.Second, what, ok)
}

func TestPool(t *testing.T) {
	m := &maker{destroyed: map[int]int{}}
	p := New(context.Background(), Options{Size: 2, IdleTimeout: -1}, m.funcs())
	waitFor(t, "two ready", func() bool { return p.Stats().Ready == 2 })

	// The oldest fitting thing is handed out once; the pool refills after Done.
	got, ok, err := p.Take(func(thing) bool { return true })
	if err != nil || !ok || got.id != 1 {
		t.Fatalf("Take: %+v %v %v", got, ok, err)
	}
	if s := p.Stats(); s.Ready != 1 || s.Busy != 1 || s.Hits != 1 {
		t.Fatalf("stats after a take: %+v", s)
	}
	p.Done()
	waitFor(t, "refilled", func() bool { s := p.Stats(); return s.Ready == 2 && s.Busy == 0 })

	// Nothing fits: a miss, and the caller still calls Done.
	if _, ok, _ := p.Take(func(thing) bool { return false }); ok {
		t.Fatal("a thing that does not fit was handed out")
	}
	p.Done()
	if s := p.Stats(); s.Misses != 1 {
		t.Fatalf("stats after a miss: %+v", s)
	}

	// What things are made from changes: the next one made shows the ready
	// ones stale, and they are destroyed, never handed out.
	m.mu.Lock()
	m.gen = 1
	m.mu.Unlock()
	got, _, _ = p.Take(func(thing) bool { return true })
	p.Done()
	waitFor(t, "only fresh things ready", func() bool {
		ok := true
		n := 0
		p.Each(func(x thing) { ok = ok && x.gen == 1; n++ })
		return ok && n == 2
	})
	if got.gen != 0 {
		t.Fatalf("took %+v", got)
	}

	// Close destroys what is ready, waits for the uses, refuses new Takes.
	used, _, _ := p.Take(func(thing) bool { return true })
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close did not wait for a use in progress")
	case <-time.After(50 * time.Millisecond):
	}
	p.Done()
	<-closed
	if _, _, err := p.Take(func(thing) bool { return true }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Take after Close: %v", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// Every thing made was either handed out (ids 1, the first gen-0 take,
	// used) or destroyed exactly once.
	handed := map[int]bool{1: true, got.id: true, used.id: true}
	for id := 1; id <= m.made; id++ {
		if handed[id] != (m.destroyed[id] == 0) || m.destroyed[id] > 1 {
			t.Errorf("thing %d: handed out %v, destroyed %d times", id, handed[id], m.destroyed[id])
		}
	}
}

// TestIdleAndFailures: an idle pool lets its things go and refills when
// asked; failed preparations are counted, backed off, and do not stop it.
func TestIdleAndFailures(t *testing.T) {
	m := &maker{destroyed: map[int]int{}, fail: errors.New("no namespaces today")}
	p := New(context.Background(), Options{Size: 1, IdleTimeout: 200 * time.Millisecond}, m.funcs())
	defer p.Close()
	waitFor(t, "failures counted", func() bool { s := p.Stats(); return s.Failed >= 2 && s.LastError == "no namespaces today" })
	m.mu.Lock()
	m.fail = nil
	m.mu.Unlock()
	p.Take(func(thing) bool { return true })
	p.Done()
	waitFor(t, "ready after the failures", func() bool { return p.Stats().Ready == 1 })
	waitFor(t, "idle drop", func() bool { return p.Stats().Ready == 0 })
	if _, ok, _ := p.Take(func(thing) bool { return true }); ok {
		t.Fatal("an idle pool handed something out")
	}
	p.Done()
	waitFor(t, "refill after idle", func() bool { return p.Stats().Ready == 1 })
}

// TestDeadNotHandedOut: a ready thing that died (Funcs.Alive) is passed over
// by Take, destroyed once and replaced, without a Take asking for it.
func TestDeadNotHandedOut(t *testing.T) {
	m := &maker{destroyed: map[int]int{}}
	var mu sync.Mutex
	dead := map[int]bool{}
	fn := m.funcs()
	fn.Alive = func(x thing) bool {
		mu.Lock()
		defer mu.Unlock()
		return !dead[x.id]
	}
	p := New(context.Background(), Options{Size: 2, IdleTimeout: -1}, fn)
	defer p.Close()
	waitFor(t, "two ready", func() bool { return p.Stats().Ready == 2 })
	mu.Lock()
	dead[1] = true
	mu.Unlock()
	got, ok, err := p.Take(func(thing) bool { return true })
	if err != nil || !ok || got.id != 2 {
		t.Fatalf("Take with thing 1 dead: %+v %v %v", got, ok, err)
	}
	p.Done()
	waitFor(t, "the dead one destroyed and replaced", func() bool {
		m.mu.Lock()
		d := m.destroyed[1]
		m.mu.Unlock()
		s := p.Stats()
		return d == 1 && s.Ready == 2 && s.Died == 1
	})

	// A death no Take sees: the refiller's tick finds it.
	var victim int
	p.Each(func(x thing) { victim = max(victim, x.id) })
	mu.Lock()
	dead[victim] = true
	mu.Unlock()
	waitFor(t, "a death found without a Take", func() bool {
		m.mu.Lock()
		d := m.destroyed[victim]
		m.mu.Unlock()
		return d == 1 && p.Stats().Ready == 2
	})
	p.Each(func(x thing) {
		if dead[x.id] {
			t.Errorf("dead thing %d still ready", x.id)
		}
	})
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, n := range m.destroyed {
		if n > 1 {
			t.Errorf("thing %d destroyed %d times", id, n)
		}
	}
}

// TestCloseMidPrepare: a preparation that Close cuts short is not a failure
// of the host: not counted, not logged (a clean exit of every daemon and
// `dryexec mcp` would otherwise warn).
func TestCloseMidPrepare(t *testing.T) {
	started := make(chan struct{})
	var logged bytes.Buffer
	p := New(context.Background(), Options{Size: 1, IdleTimeout: -1, Log: slog.New(slog.NewTextHandler(&logged, nil))}, Funcs[thing]{
		Prepare: func(ctx context.Context) (thing, error) {
			close(started)
			<-ctx.Done()
			return thing{}, ctx.Err()
		},
		Destroy: func(thing) {},
	})
	<-started
	p.Close()
	if s := p.Stats(); s.Failed != 0 || s.LastError != "" {
		t.Errorf("after Close: %d failed, last error %q; want none", s.Failed, s.LastError)
	}
	if logged.Len() != 0 {
		t.Errorf("logged on Close: %s", logged.String())
	}
}

// TestStaleReplaced: things a caller marks stale (made for a world that has
// changed) leave the pool at once and are replaced by fresh ones, which the
// next Take gets; a full pool would otherwise never make one.
func TestStaleReplaced(t *testing.T) {
	m := &maker{destroyed: map[int]int{}}
	p := New(context.Background(), Options{Size: 2, IdleTimeout: -1}, m.funcs())
	defer p.Close()
	waitFor(t, "two ready", func() bool { return p.Stats().Ready == 2 })
	m.mu.Lock()
	m.gen = 1 // the world changed: what is made now is generation 1
	m.mu.Unlock()
	fits := func(x thing) bool { return x.gen == 1 }
	if _, ok, err := p.Take(fits); ok || err != nil {
		t.Fatalf("Take of a generation 1 thing before any was made: ok %v, err %v", ok, err)
	}
	if n := p.Stale(func(x thing) bool { return x.gen != 1 }); n != 2 {
		t.Fatalf("Stale took %d things, want the 2 of generation 0", n)
	}
	p.Done()
	waitFor(t, "two fresh ones ready", func() bool {
		m.mu.Lock()
		d := m.destroyed[1] + m.destroyed[2]
		m.mu.Unlock()
		return d == 2 && p.Stats().Ready == 2
	})
	got, ok, err := p.Take(fits)
	if err != nil || !ok || got.gen != 1 {
		t.Fatalf("Take after Stale: %+v %v %v, want a generation 1 thing", got, ok, err)
	}
	p.Done()
	if n := p.Stale(func(x thing) bool { return x.gen != 1 }); n != 0 {
		t.Errorf("Stale took %d fresh things", n)
	}
}
