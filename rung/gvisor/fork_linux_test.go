package gvisor_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/gvisor"
	"github.com/dryexec/dryexec/session"
)

// TestForkCarriesViewAndProcesses forks a gvisor session (checkpoint and
// restore) and requires of the branch what the parent had at the fork
// beyond its workspace: a file it wrote outside the workspace (the view's
// upper dirs, copied: without them the restore fails) and a process a
// command left running; and that neither side then sees the other's writes
// there, nor the host any of them.
func TestForkCarriesViewAndProcesses(t *testing.T) {
	ctx := context.Background()
	testreq.Need(t, testreq.GVisor, (&gvisor.Rung{}).Available(ctx))
	s, err := session.Open(ctx, session.Options{Rung: gvisor.Name})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	name := "/tmp/dryexec-gvfork-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	sh := func(s *session.Session, cmd, want string) {
		t.Helper()
		r, err := s.Shell(ctx, cmd, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if r.Stdout != want {
			t.Fatalf("%s: %q (exit %d, %q), want %q", cmd, r.Stdout, r.ExitCode, r.Stderr, want)
		}
	}
	sh(s, "echo parent > "+name+".a; setsid sleep 100000 >/dev/null 2>&1 & echo $! > bg.pid", "")
	bs, err := s.Fork(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	b := bs[0]
	defer b.Close()
	sh(b, "cat "+name+".a; kill -0 $(cat bg.pid) && echo alive; echo branch > "+name+".b", "parent\nalive\n")
	sh(s, "test -e "+name+".b && echo leaked; echo late > "+name+".c", "")
	sh(b, "test -e "+name+".c && echo leaked; cat "+name+".b", "branch\n")
	for _, x := range []string{".a", ".b", ".c"} {
		if _, err := os.Lstat(name + x); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the host has %s%s: %v", name, x, err)
		}
	}
}
