package gvisor_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/procfs"
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

// TestForkedSessionMemoryLimit: a session restored from a checkpoint (a
// fork's branch; a resumed parked session is restored the same way) keeps
// the memory limit's order: every process inside gVisor comes before
// runsc's own for the host OOM killer (oom_score_adj 1000 on each stub),
// and a command that outgrows the limit is killed while the branch goes on.
func TestForkedSessionMemoryLimit(t *testing.T) {
	ctx := context.Background()
	s := openLimitedSession(ctx, t)
	bs, err := s.Fork(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	b := bs[0]
	defer b.Close()
	if r, err := b.Shell(ctx, "echo branch", time.Minute); err != nil || r.Stdout != "branch\n" {
		t.Fatalf("the branch: %+v, %v", r, err)
	}
	stubs := 0
	for _, boot := range procfs.TaskChildren(b.GuestPID()) {
		for _, stub := range procfs.TaskChildren(boot) {
			adj, err := os.ReadFile("/proc/" + strconv.Itoa(stub) + "/oom_score_adj")
			if err != nil {
				continue // gone meanwhile
			}
			stubs++
			if strings.TrimSpace(string(adj)) != "1000" {
				t.Errorf("stub %d of the branch's sandbox: oom_score_adj %s, want 1000", stub, strings.TrimSpace(string(adj)))
			}
		}
	}
	if stubs == 0 {
		t.Fatal("no stub process found under the branch's runsc")
	}
	bomb := `python3 -c 'x = []
while True: x.append(b"\1" * (16 << 20))'; echo after $?`
	if _, err := b.Shell(ctx, bomb, time.Minute); err != nil {
		t.Fatalf("the bomb in the branch: %v (the branch died?)", err)
	}
	if r, err := b.Shell(ctx, "echo alive", time.Minute); err != nil || r.Stdout != "alive\n" {
		t.Fatalf("the branch after the bomb: %+v, %v", r, err)
	}
}
