package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/testwait"
	"github.com/dryexec/dryexec/session"
)

// onlyGuest returns the pid of the one session guest this process runs.
func onlyGuest(t *testing.T) int {
	t.Helper()
	pids := guestPIDs(t)
	if len(pids) != 1 {
		t.Fatalf("want exactly one guest session child of pid %d, found %v", os.Getpid(), pids)
	}
	return pids[0]
}

// waitGone waits until pid is no longer our child (exited and reaped).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	testwait.For(t, 10*time.Second, fmt.Sprintf("guest %d to be reaped", pid), func() bool { return ppid(pid) != os.Getpid() })
}

// calls are every session call, for "after Close" and "after a kill".
var calls = []struct {
	name string
	call func(ctx context.Context, s *session.Session, dir string) error // dir: an empty host dir
}{
	{"Shell", func(ctx context.Context, s *session.Session, dir string) error {
		_, err := s.Shell(ctx, "echo hi", 10*time.Second)
		return err
	}},
	{"Ping", func(ctx context.Context, s *session.Session, dir string) error { _, err := s.Ping(ctx); return err }},
	{"Diff", func(ctx context.Context, s *session.Session, dir string) error {
		_, err := s.Diff(ctx, false)
		return err
	}},
	{"DiffRebase", func(ctx context.Context, s *session.Session, dir string) error {
		_, err := s.Diff(ctx, true)
		return err
	}},
	{"Reset", func(ctx context.Context, s *session.Session, dir string) error { return s.Reset(ctx) }},
	{"PushTar", func(ctx context.Context, s *session.Session, dir string) error {
		return s.PushTar(ctx, bytes.NewReader(nil))
	}},
	{"PushDir", func(ctx context.Context, s *session.Session, dir string) error { return s.PushDir(ctx, dir) }},
}

var lifecycleCases = []conformanceCase{
	{"close_is_idempotent", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		run(t, s, "true")
		for i := 0; i < 3; i++ {
			if err := s.Close(); err != nil {
				t.Fatalf("Close #%d: %v", i+1, err)
			}
		}
	}},
	{"calls_after_close_fail", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		s.Close()
		for _, c := range calls {
			c2, cancel := context.WithTimeout(ctx(t), 20*time.Second)
			err := c.call(c2, s, t.TempDir())
			cancel()
			if err == nil {
				t.Errorf("%s after Close succeeded", c.name)
			} else if errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s after Close hung", c.name)
			}
		}
	}},
	// A guest killed from outside: the next call fails with ErrSessionLost
	// (every later one too), Close still works, and a new session works.
	{"guest_sigkill_is_session_lost", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		run(t, s, "echo before > f")
		pid := onlyGuest(t)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		for _, c := range calls {
			c2, cancel := context.WithTimeout(ctx(t), 20*time.Second)
			err := c.call(c2, s, t.TempDir())
			cancel()
			if !errors.Is(err, dryexec.ErrSessionLost) {
				t.Errorf("%s after the guest was killed: %v; want ErrSessionLost", c.name, err)
			}
		}
		if err := s.Close(); err != nil {
			t.Errorf("Close after the kill: %v", err)
		}
		waitGone(t, pid)
		s2 := openDefault(t, open)
		wantOut(t, s2, "ls -A; echo ok", "ok\n")
	}},
	// A guest killed in the middle of an exec: that call fails with
	// ErrSessionLost instead of waiting for the command, and the command's
	// processes do not outlive the guest.
	{"guest_sigkill_during_exec", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		pid := onlyGuest(t)
		marker := uniqueSleep()
		go func() {
			// The exec has started both its sleeps: the kill lands during it.
			if testwait.Until(30*time.Second, func() bool { return len(running(marker)) == 2 }) == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}()
		start := time.Now()
		_, err := s.Shell(ctx(t), marker+" & "+marker, 0)
		if !errors.Is(err, dryexec.ErrSessionLost) {
			t.Fatalf("Shell while the guest was killed: %v; want ErrSessionLost", err)
		}
		if took := time.Since(start); took > 30*time.Second {
			t.Errorf("the call returned after %v", took)
		}
		s.Close()
		if left := waitNoProcess(marker); len(left) > 0 {
			t.Fatalf("the exec's processes outlived the guest: %v", left)
		}
	}},
	// Close while an exec runs: the exec's call fails, Close returns promptly,
	// and the exec's processes are gone.
	{"close_during_exec", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		marker := uniqueSleep()
		done := make(chan error, 1)
		go func() {
			_, err := s.Shell(ctx(t), marker+" & "+marker, 0)
			done <- err
		}()
		waitRunning(t, marker, 2)
		start := time.Now()
		s.Close()
		if took := time.Since(start); took > 15*time.Second {
			t.Errorf("Close took %v", took)
		}
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("the exec's call succeeded after Close")
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("the exec's call did not return after Close")
		}
		if pids := guestPIDs(t); len(pids) != 0 {
			t.Errorf("guests left after Close: %v", pids)
		}
		if left := waitNoProcess(marker); len(left) > 0 {
			t.Fatalf("the exec's processes outlived Close: %v", left)
		}
	}},
	// After Close the guest process is gone (exited and reaped).
	{"no_guest_process_after_close", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		run(t, s, "sleep 60 & echo started")
		pid := onlyGuest(t)
		s.Close()
		if ppid(pid) == os.Getpid() {
			t.Errorf("guest %d is still our child after Close", pid)
		}
		if pids := guestPIDs(t); len(pids) != 0 {
			t.Errorf("guests left after Close: %v", pids)
		}
	}},
	// After Close (and while a session runs) the host's mount table has no
	// mount of the session's.
	{"no_host_mounts", func(t *testing.T, open opener) {
		before := mountSnapshot(t)
		s := openDefault(t, open)
		ws := s.Info().Workspace
		run(t, s, "echo x > f; mkdir -p d/e")
		getDiff(t, s, true)
		if err := s.Reset(ctx(t)); err != nil {
			t.Fatal(err)
		}
		seed(t, s, tree{"p": file("p")})
		if m := sessionMounts(before, mountSnapshot(t), ws); len(m) > 0 {
			t.Errorf("mounts on the host while the session runs: %q", m)
		}
		s.Close()
		if m := sessionMounts(before, mountSnapshot(t), ws); len(m) > 0 {
			t.Errorf("mounts on the host after Close: %q", m)
		}
	}},
	// Many sessions opened and closed one after the other leave nothing.
	{"open_close_repeatedly", func(t *testing.T, open opener) {
		for i := 0; i < 5; i++ {
			s := openDefault(t, open)
			wantOut(t, s, "echo ok", "ok\n")
			s.Close()
		}
		if pids := guestPIDs(t); len(pids) != 0 {
			t.Errorf("guests left: %v", pids)
		}
	}},
}

var sleepSeq atomic.Int64

// uniqueSleep is a `sleep` command line no other process on the machine runs,
// to find the exec's processes from the host (any rung's pid namespace is
// visible from here).
func uniqueSleep() string {
	return fmt.Sprintf("sleep 3%d.%d%d", sleepSeq.Add(1), os.Getpid(), time.Now().UnixNano()%1000000)
}

// waitNoProcess waits up to 5s for every process whose command line is
// command to end, and kills (and returns) any left.
func waitNoProcess(command string) []int {
	var left []int
	if testwait.Until(5*time.Second, func() bool { left = running(command); return len(left) == 0 }) == nil {
		return nil
	}
	for _, p := range left {
		syscall.Kill(p, syscall.SIGKILL)
	}
	return left
}

// waitRunning waits until n processes whose command line is command run (the
// exec has reached its marker) and returns them.
func waitRunning(t *testing.T, command string, n int) []int {
	t.Helper()
	var pids []int
	testwait.For(t, 30*time.Second, fmt.Sprintf("%d processes %q", n, command), func() bool { pids = running(command); return len(pids) >= n })
	return pids
}

// running lists the live (not zombie) processes whose command line is command.
func running(command string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cl, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || strings.Join(strings.Split(strings.TrimRight(string(cl), "\x00"), "\x00"), " ") != command {
			continue
		}
		if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); strings.Contains(string(st), ") Z ") {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}
