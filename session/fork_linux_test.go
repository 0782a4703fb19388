package session

import (
	"context"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/linuxns"
)

// readyGuests are the guest pids of the sessions s's fork family keeps open
// ahead, once the pool has settled with want of them.
func readyGuests(t *testing.T, s *Session, want int) []int {
	t.Helper()
	s.fork.mu.Lock()
	f := s.fork.family
	s.fork.mu.Unlock()
	if f == nil {
		t.Fatal("no fork family after a fork")
	}
	f.mu.Lock()
	p := f.pool
	f.mu.Unlock()
	if p == nil {
		t.Fatal("the fork family has no pool")
	}
	waitPool(t, p, func(n int) bool { return n == want })
	var pids []int
	p.w.Each(func(ps pooled) { pids = append(pids, ps.s.GuestPID()) })
	return pids
}

// TestForkWarmBranches (ns): after a session's first fork, which opens its
// branch cold, its branches are sessions its fork family opened ahead (their
// guests ran before the Fork call), for forks of the session and of its
// branches alike, grown to the largest fork; they see the parent's files
// and write apart; the sessions opened ahead go with the family's last
// session.
func TestForkWarmBranches(t *testing.T) {
	testreq.Need(t, testreq.NS, (&linuxns.Rung{}).Available(context.Background()))
	ctx := testCtx(t)
	s, err := Open(ctx, Options{Rung: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if r, err := s.Shell(ctx, "echo a > a", time.Minute); err != nil || r.ExitCode != 0 {
		t.Fatalf("%+v %v", r, err)
	}
	first, err := s.Fork(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer first[0].Close()
	for _, c := range []struct {
		name        string
		from        *Session
		n, ready    int // branches; sessions opened ahead before
		openedAhead int // how many of the branches were
	}{
		{"the session again", s, 1, 1, 1},
		{"a branch (same family)", first[0], 1, 1, 1},
		{"a larger fork (one cold; the pool grows)", s, 2, 1, 1},
		{"that larger fork again", first[0], 2, 2, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			ready := readyGuests(t, s, c.ready)
			bs, err := c.from.Fork(ctx, c.n)
			if err != nil {
				t.Fatal(err)
			}
			ahead := 0
			for i, b := range bs {
				defer b.Close()
				if slices.Contains(ready, b.GuestPID()) {
					ahead++
				}
				mark := strconv.Itoa(i)
				r, err := b.Shell(ctx, "cat a; echo "+mark+" > b; cat b", time.Minute)
				if err != nil || r.Stdout != "a\n"+mark+"\n" {
					t.Errorf("branch %d: %+v %v", i, r, err)
				}
			}
			if ahead != c.openedAhead {
				t.Errorf("%d of %d branches were opened ahead, want %d (ready: %v)", ahead, c.n, c.openedAhead, ready)
			}
			if r, err := c.from.Shell(ctx, "cat b 2>/dev/null || echo none", time.Minute); err != nil || r.Stdout != "none\n" {
				t.Errorf("the forked session sees a branch's write: %+v %v", r, err)
			}
		})
	}
	// The pool refills to the largest fork; every session of the family
	// closed, those opened ahead are gone.
	waiting := readyGuests(t, s, 2)
	fam := s.fork.family
	s.Close()
	first[0].Close()
	fam.mu.Lock()
	refs, pool := fam.refs, fam.pool
	fam.mu.Unlock()
	if refs != 0 || pool != nil {
		t.Errorf("the family after its last session closed: %d holds, pool %v", refs, pool)
	}
	for _, pid := range waiting {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			t.Errorf("guest %d of a session opened ahead outlived its family", pid)
		}
	}
}
