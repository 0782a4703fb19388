package session

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/linuxns"
)

// TestGuestKilledDuringExec: when a session's guest supervisor dies while an
// exec is in flight, that exec's error says so (how the guest ended, that
// the exec's effects are unknown); every later call is session_lost, saying
// the guest is gone.
func TestGuestKilledDuringExec(t *testing.T) {
	testreq.Need(t, testreq.NS, (&linuxns.Rung{}).Available(context.Background()))
	ctx := testCtx(t)
	s, err := Open(ctx, Options{Rung: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The marker: the exec's own process, seen from the host by its unique
	// argument.
	arg := strconv.FormatInt(int64(1000+time.Now().UnixNano()%1000), 10) + "." + strconv.Itoa(os.Getpid())
	done := make(chan error, 1)
	go func() {
		_, err := s.Shell(ctx, "exec sleep "+arg, 0)
		done <- err
	}()
	for !running("sleep\x00" + arg + "\x00") {
		select {
		case err := <-done:
			t.Fatalf("the exec ended before the guest was killed: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	if err := syscall.Kill(s.guestPID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = <-done
	if !errors.Is(err, dryexec.ErrSessionLost) || !strings.Contains(err.Error(), "died (killed) while exec_shell was in flight") ||
		!strings.Contains(err.Error(), "unknown") {
		t.Fatalf("the exec in flight: %v; want session lost, saying the guest died (killed) during it", err)
	}
	_, err = s.Shell(ctx, "true", 0)
	if !errors.Is(err, dryexec.ErrSessionLost) || !strings.Contains(err.Error(), "is gone (died (killed))") {
		t.Fatalf("a later exec: %v; want session lost, saying the guest is gone", err)
	}
}

// running says whether a process's command line is cmdline.
func running(cmdline string) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && string(b) == cmdline {
			return true
		}
	}
	return false
}
