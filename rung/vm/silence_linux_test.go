package vm_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/rung/vm"
	"github.com/dryexec/dryexec/wire"
)

// rawSession opens a session's sandbox on r (whose fields, SilenceLimit
// among them, session.Open has no way to set) and speaks the wire to its
// guest as package session does: hello, session.start. onEmit gets each
// emit of the guest's Python. session.Session turns the wire.ErrClosed of
// a call into dryexec.ErrSessionLost, naming the sandbox's GuestEnded.
func rawSession(t *testing.T, r *vm.Rung, id string, onEmit func(name string)) (dryexec.Sandbox[wire.SessionStart], *wire.Peer) {
	t.Helper()
	sb, err := r.OpenSandbox(t.Context(), dryexec.SandboxSpec{ID: id, Limits: faultLimits})
	if err != nil {
		t.Fatalf("opening a vm sandbox: %v", err)
	}
	t.Cleanup(func() { sb.Close() })
	conn := wire.NewConn(sb.Conn())
	if hello, err := conn.Read(); err != nil || hello.Kind != wire.KindHello {
		t.Fatalf("no hello from the session guest: %v", err)
	}
	peer := wire.NewPeer(conn, func(_ context.Context, f *wire.Frame) (any, [][]byte, error) {
		if f.Verb == wire.VerbEmit {
			var e wire.Emit
			if err := f.Decode(&e); err == nil {
				onEmit(e.Name)
			}
		}
		return nil, nil, nil
	})
	go peer.Run(context.Background())
	start := wire.SessionStart{Workspace: sb.Workspace(), OutputCap: 1 << 16, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}}
	sb.Configure(&start)
	if _, err := peer.Call(t.Context(), wire.VerbSessionStart, &start, wire.Attachments(start.TrustBundle)...); err != nil {
		t.Fatalf("session.start: %v", err)
	}
	return sb, peer
}

// TestSessionVMSilent: QEMU stopped (SIGSTOP) while an exec without a
// timeout runs is a VM that stopped answering: after SilenceLimit the host
// kills it, the call ends (session: ErrSessionLost) naming the silence,
// as does every later one, and once closed nothing of the VM is left: no
// QEMU, no cgroup, no socket, no temporary dir.
func TestSessionVMSilent(t *testing.T) {
	requireVMSession(t)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	socksBefore := sockets(t)
	started := make(chan struct{}, 1)
	r := &vm.Rung{SilenceLimit: 10 * time.Second, BootTimeout: 5 * time.Minute}
	id := dryexec.NewTrialID()
	sb, peer := rawSession(t, r, id, func(name string) {
		if name == "started" {
			started <- struct{}{}
		}
	})
	qemu := qemuChildren(t)
	if len(qemu) != 1 {
		t.Fatalf("QEMU children %v, want one", qemu)
	}
	signalOn(started, qemu[0], syscall.SIGSTOP)
	_, err := peer.Call(t.Context(), wire.VerbExecPython, &wire.ExecPython{Code: "emit('started', 1)\nimport time\ntime.sleep(600)"})
	if !errors.Is(err, wire.ErrClosed) {
		t.Fatalf("exec in a stopped VM: %v; want the session gone", err)
	}
	if how, _ := sb.GuestEnded(); !strings.Contains(how, "stopped answering") {
		t.Errorf("GuestEnded %q: want the silent VM named", how)
	}
	if _, err := peer.Call(t.Context(), wire.VerbExecShell, &wire.ExecShell{Command: "true"}); !errors.Is(err, wire.ErrClosed) {
		t.Errorf("exec after the VM fell silent: %v; want the session gone", err)
	}
	sb.Close()
	checkNothingLeft(t, id, tmp, socksBefore)
}

// TestSessionQuietExecLives: an exec without a timeout that says nothing
// for longer than SilenceLimit is not taken for a hung VM: the guest's
// heartbeat keeps it alive, and the exec ends normally.
func TestSessionQuietExecLives(t *testing.T) {
	requireVMSession(t)
	r := &vm.Rung{SilenceLimit: 10 * time.Second, BootTimeout: 5 * time.Minute}
	_, peer := rawSession(t, r, dryexec.NewTrialID(), func(string) {})
	f, err := peer.Call(t.Context(), wire.VerbExecShell, &wire.ExecShell{Command: "sleep 30; echo done"})
	if err != nil {
		t.Fatalf("a quiet exec: %v", err)
	}
	var res wire.ShellResult
	if err := f.Decode(&res); err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || strings.TrimSpace(res.Transcript) != "done" {
		t.Fatalf("exit %d, output %q: want a normal end", res.ExitCode, res.Transcript)
	}
}
