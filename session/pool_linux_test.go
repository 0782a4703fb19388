package session

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/internal/testwait"
	"github.com/dryexec/dryexec/rung/linuxns"
)

func waitPool(t *testing.T, p *Pool, ok func(ready int) bool) {
	t.Helper()
	testwait.For(t, time.Minute, "the pool to settle", func() bool { s := p.Stats(); return ok(s.Ready) && s.Busy == 0 })
}

// TestSessionPool: Open with the template's options hands out a session
// opened ahead, which has run nothing, gets the caller's host objects, and
// works; other options open a session of their own; Close closes the unused
// ones.
func TestSessionPool(t *testing.T) {
	testreq.Need(t, testreq.NS, (&linuxns.Rung{}).Available(context.Background()))
	p := NewPool(context.Background(), PoolOptions{Size: 1, Template: Options{Rung: "ns"}})
	defer p.Close()
	waitPool(t, p, func(n int) bool { return n == 1 })

	d := &echoDispatcher{}
	s, err := p.Open(testCtx(t), Options{HostObjects: map[string]any{"db": d}, Allow: map[string][]string{"db": {"query"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if st := p.Stats(); st.Hits != 1 {
		t.Fatalf("the template's options did not take a pooled session: %+v", st)
	}
	// Nothing but the session's own processes (its guest, a pre-started
	// python runner) and this pipeline: no trace of anything earlier.
	r, err := s.Shell(testCtx(t), `pwd; echo "$HOME"; ls -A | wc -l; ps -e -o comm= | grep -cvx -e exe -e dryexec -e dryexec-guest -e python3 -e ps -e sh -e bash -e grep`, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r.Stdout != "/workspace\n/workspace\n0\n0\n" {
		t.Fatalf("a pooled session is not fresh: %q (stderr %q)", r.Stdout, r.Stderr)
	}
	py, err := s.Python(testCtx(t), "host.db.query(1)['method']", nil, 0)
	if err != nil || !py.OK || strings.TrimSpace(py.Transcript) != "'query'" {
		t.Fatalf("host object through a pooled session: %+v %v", py, err)
	}

	// Other options: a session of its own, with them.
	o, err := p.Open(testCtx(t), Options{Env: map[string]string{"PATH": "/usr/bin:/bin", "MARK": "own"}})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if r, err := o.Shell(testCtx(t), `echo $MARK`, 30*time.Second); err != nil || r.Stdout != "own\n" {
		t.Fatalf("own session: %+v %v", r, err)
	}
	if st := p.Stats(); st.Misses != 1 {
		t.Fatalf("other options took a pooled session: %+v", st)
	}

	// Close closes the ready one: its guest is gone.
	waitPool(t, p, func(n int) bool { return n == 1 })
	var pids []int
	p.w.Each(func(ps pooled) { pids = append(pids, ps.s.guestPID()) })
	p.Close()
	for _, pid := range pids {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			t.Errorf("pooled session guest %d outlived Close", pid)
		}
	}
	if _, err := p.Open(testCtx(t), Options{}); err == nil {
		t.Fatal("Open after Close")
	}
}

// TestSessionPoolDeadGuestReplaced: a pooled session whose guest died while
// it waited is never handed out (its Open failed): Open opens one of its
// own, and the dead one is counted and replaced.
func TestSessionPoolDeadGuestReplaced(t *testing.T) {
	testreq.Need(t, testreq.NS, (&linuxns.Rung{}).Available(context.Background()))
	p := NewPool(context.Background(), PoolOptions{Size: 1, Template: Options{Rung: "ns"}})
	defer p.Close()
	waitPool(t, p, func(n int) bool { return n == 1 })
	var dead *Session
	p.w.Each(func(ps pooled) { dead = ps.s })
	if err := syscall.Kill(dead.guestPID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The marker: the session has seen its guest's stream end.
	testwait.For(t, time.Minute, "the killed guest's stream to end", dead.gone.Load)
	s, err := p.Open(testCtx(t), Options{})
	if err != nil {
		t.Fatalf("Open after the pooled guest died: %v", err)
	}
	defer s.Close()
	if r, err := s.Shell(testCtx(t), `echo alive`, 30*time.Second); err != nil || r.Stdout != "alive\n" {
		t.Fatalf("shell: %+v %v", r, err)
	}
	if st := p.Stats(); st.Hits != 0 || st.Misses != 1 {
		t.Fatalf("stats %+v: want the dead session passed over and a session of its own (a miss)", st)
	}
	// The refiller destroys the dead one (and counts it) after the take.
	testwait.For(t, time.Minute, "the dead session counted", func() bool { return p.Stats().Died == 1 })
}

// TestSessionPoolNewSecretNotExposed: a credential that appears after a
// session was opened ahead makes that session stale: Open does not hand it
// out, and the session it opens sees the credential masked.
func TestSessionPoolNewSecretNotExposed(t *testing.T) {
	testreq.Need(t, testreq.NS, (&linuxns.Rung{}).Available(context.Background()))
	home := t.TempDir()
	t.Setenv("HOME", home)
	p := NewPool(context.Background(), PoolOptions{Size: 1, Template: Options{Rung: "ns"}})
	defer p.Close()
	waitPool(t, p, func(n int) bool { return n == 1 })
	cred := home + "/.aws/credentials"
	if err := os.MkdirAll(home+"/.aws", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cred, []byte("SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := p.Open(testCtx(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if st := p.Stats(); st.Hits != 0 || st.Misses != 1 {
		t.Fatalf("stats %+v: the stale session was handed out", st)
	}
	r, err := s.Shell(testCtx(t), "cat "+cred+"; echo end", 30*time.Second)
	if err != nil || strings.Contains(r.Stdout, "SECRET") {
		t.Fatalf("the new credential was readable: %q %v", r.Stdout, err)
	}
	// The stale session is replaced at once, not kept until the pool goes
	// idle: the next Open gets one opened for the changed host.
	waitPool(t, p, func(n int) bool { return n == 1 })
	s2, err := p.Open(testCtx(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if st := p.Stats(); st.Hits != 1 || st.Misses != 1 {
		t.Fatalf("stats %+v: the next Open did not get a session opened for the changed host", st)
	}
}
