package server_test

import (
	"context"
	"errors"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/server"
	"github.com/dryexec/dryexec/session"
)

// TestSessionRungCheck: the daemon opens a session on exactly the rungs
// session.CheckRung accepts, and refuses the others with its reason. It
// has no list of session rungs of its own: "best" resolves to a rung that
// holds sessions, and a rung is refused for what it lacks here (gvisor
// without runsc; vm where no VM boots or the guest is not static: a test
// binary with cgo), as the session package words it.
func TestSessionRungCheck(t *testing.T) {
	requireNS(t)
	d := startDaemon(t, server.Config{}, server.HandlerOptions{})
	for _, name := range []string{"ns", "best", "host", "gvisor", "vm", "seatbelt"} {
		t.Run(name, func(t *testing.T) {
			want := session.CheckRung(context.Background(), name)
			if want == nil {
				var info server.SessionInfo
				d.ok(t, "POST", "/v1/sessions", server.SessionRequest{Rung: name}, 201, &info)
				d.ok(t, "DELETE", "/v1/sessions/"+info.SessionID, nil, 200, nil)
				return
			}
			var iu *dryexec.IsolationUnavailableError
			if !errors.As(want, &iu) {
				t.Fatalf("session.CheckRung(%s) = %v, want an IsolationUnavailableError", name, want)
			}
			got := d.fails(t, "POST", "/v1/sessions", server.SessionRequest{Rung: name}, 503, "isolation_unavailable")
			if got.Rung != iu.Rung || got.Missing != iu.Missing {
				t.Errorf("refused for %s: %q, want session.CheckRung's %s: %q", got.Rung, got.Missing, iu.Rung, iu.Missing)
			}
		})
	}
}
