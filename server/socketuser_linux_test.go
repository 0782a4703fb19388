package server_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/server"
)

// asOtherUser runs f on a thread of its own whose uids and gids are those of
// nobody: a raw setresuid changes only the calling thread (Go's Setresuid
// would change every thread), and leaving root's uids drops every
// capability. The thread is never unlocked, so it ends with the goroutine and
// no other goroutine ever runs as nobody.
func asOtherUser(t *testing.T, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
			done <- e
			return
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, 65534, 65534, 65534); e != 0 {
			done <- e
			return
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, 65534, 65534, 65534); e != 0 {
			done <- e
			return
		}
		done <- f()
	}()
	return <-done
}

// TestSocketRefusesOtherUsers: another local user cannot reach the daemon:
// connecting to its socket is refused by the kernel although that user may
// see it (its directories opened to everyone here, so that only the socket's
// own mode stands in the way). Made connectable to all, the same attempt
// gets through: the refusal is the socket's mode, not the test's set-up.
func TestSocketRefusesOtherUsers(t *testing.T) {
	testreq.NeedRoot(t)
	d := startDaemon(t, server.Config{}, server.HandlerOptions{})
	for dir := filepath.Dir(d.sock); dir != "/"; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(dir, fi.Mode().Perm()|0o011); err != nil {
				t.Fatal(err)
			}
		}
	}
	dial := func() error {
		if _, err := os.Stat(d.sock); err != nil {
			return err // the directories must not be what refuses
		}
		c, err := net.Dial("unix", d.sock)
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := asOtherUser(t, dial); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("another user connecting to the daemon's socket: %v, want EACCES", err)
	}
	if err := os.Chmod(d.sock, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := asOtherUser(t, dial); err != nil {
		t.Fatalf("control: with the socket opened to all, another user's connect failed too (%v): the test proves nothing", err)
	}
}
