package session

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/linuxns"
)

// TestNSExecViolations: on the ns rung every exec runs under the seccomp
// filter; a refused call fails with its errno and comes back in that exec's
// result (shell and Python), and only in that one. A signal to the guest is
// refused (Landlock scope) and the session lives on.
func TestNSExecViolations(t *testing.T) {
	testreq.Need(t, testreq.NS, (&linuxns.Rung{}).Available(context.Background()))
	ctx := testCtx(t)
	s, err := Open(ctx, Options{Rung: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := s.Shell(ctx, `/usr/bin/python3 -c 'import ctypes; l = ctypes.CDLL(None, use_errno=True); print(l.syscall(250, 0, 0, 0), ctypes.get_errno())'; kill -TERM 1; echo "kill=$?"`, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.Stdout, "-1 1\n") || strings.Contains(r.Stdout, "kill=0") {
		t.Errorf("keyctl or the signal to the guest was not refused: %q", r.Transcript)
	}
	if len(r.Violations) != 1 || r.Violations[0].Kind != "syscall" || !strings.HasPrefix(r.Violations[0].Detail, "keyctl(") ||
		!strings.Contains(r.Violations[0].Exe, "python3") || r.Violations[0].PID <= 1 {
		t.Errorf("violations %+v, want the keyctl", r.Violations)
	}
	r, err = s.Shell(ctx, "true", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Violations) != 0 {
		t.Errorf("a clean exec reports %+v", r.Violations)
	}
	p, err := s.Python(ctx, "import socket\ntry:\n    socket.socket(40, socket.SOCK_STREAM)\nexcept OSError as e:\n    err = e.errno", nil, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Violations) != 1 || !strings.HasPrefix(p.Violations[0].Detail, "socket(AF_VSOCK") {
		t.Errorf("python violations %+v, want the vsock socket", p.Violations)
	}
}
