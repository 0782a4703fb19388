package gvisor_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/gvisor"
	"github.com/dryexec/dryexec/session"
	"golang.org/x/sys/unix"
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
	// The exec waits for the daemon to have its own session: what is
	// still in the exec's process group when the shell ends goes with it.
	sh(s, "echo parent > "+name+".a; setsid sh -c 'echo $$ > bg.pid; exec sleep 100000' >/dev/null 2>&1 & until [ -s bg.pid ]; do :; done", "")
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

// TestForkAfterHostMount forks a gvisor session after a tmpfs was mounted
// on the host (as another program may at any time): the branch's view is
// built over the parent's mounts, so the restore sees the tree the parent's
// kernel saw, and the fork is not refused. The new mount stays out of both
// views, and what the host put in it reaches neither.
func TestForkAfterHostMount(t *testing.T) {
	ctx := context.Background()
	testreq.Need(t, testreq.GVisor, (&gvisor.Rung{}).Available(ctx))
	s, err := session.Open(ctx, session.Options{Rung: gvisor.Name})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mnt := t.TempDir()
	if err := unix.Mount("dryexec-test", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(mnt, unix.MNT_DETACH)
	if err := os.WriteFile(filepath.Join(mnt, "new"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Shell(ctx, "echo before-fork > f", time.Minute); err != nil {
		t.Fatal(err)
	}
	bs, err := s.Fork(ctx, 1)
	if err != nil {
		t.Fatalf("fork after a host mount appeared: %v", err)
	}
	defer bs[0].Close()
	for _, x := range []*session.Session{s, bs[0]} {
		r, err := x.Shell(ctx, "cat f; test -e "+mnt+"/new && echo sees-new-mount; true", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if r.Stdout != "before-fork\n" {
			t.Errorf("%q (%q), want the parent's file and not the mount made after it started", r.Stdout, r.Stderr)
		}
	}
}
