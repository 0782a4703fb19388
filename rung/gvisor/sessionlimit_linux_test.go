package gvisor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/gvisor"
	"github.com/dryexec/dryexec/session"
)

// TestSessionMemoryLimit: a session command that outgrows the memory limit
// is killed by the sandbox's host cgroup, and the session reports it once,
// as a limit hit named by the limit asked for; the session goes on.
func TestSessionMemoryLimit(t *testing.T) {
	ctx := context.Background()
	s := openLimitedSession(ctx, t)
	bomb := `python3 -c 'x = []
while True: x.append(b"\1" * (16 << 20))'; echo after $?`
	if _, err := s.Shell(ctx, bomb, time.Minute); err != nil {
		t.Fatalf("the bomb: %v (the session died?)", err)
	}
	var hits []string
	for _, v := range s.Violations() {
		if v.Kind == "limit" {
			hits = append(hits, v.Detail)
		}
	}
	if len(hits) != 1 || !strings.Contains(hits[0], "memory limit 268435456 bytes") {
		t.Errorf("limit hits %q, want one naming the 256 MiB memory limit", hits)
	}
	if r, err := s.Shell(ctx, "echo alive", time.Minute); err != nil || r.Stdout != "alive\n" {
		t.Fatalf("after the bomb: %+v, %v", r, err)
	}
	if n := len(s.Violations()); n != len(hits) {
		t.Errorf("%d violations after a quiet command, want the %d before (hits are counted once)", n, len(hits))
	}
}

// openLimitedSession opens a gvisor session with a 256 MiB memory limit,
// closed when t ends.
func openLimitedSession(ctx context.Context, t *testing.T) *session.Session {
	t.Helper()
	testreq.NeedRoot(t)
	testreq.Need(t, testreq.GVisor, (&gvisor.Rung{}).Available(ctx))
	s, err := session.Open(ctx, session.Options{Rung: gvisor.Name, Limits: dryexec.Limits{MemoryBytes: 256 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
