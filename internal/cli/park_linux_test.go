package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dryexec/dryexec/server"
)

// park, parked and resume reach the daemon that holds the session: a rung
// that cannot park refuses, with the daemon's code, and the session goes
// on; nothing is listed; a session never parked does not resume.
func TestParkCLI(t *testing.T) {
	requireNS(t)
	home := filepath.Join(t.TempDir(), "home")
	d := startTestDaemon(t, home)
	vars := map[string]string{"XDG_RUNTIME_DIR": d.runtime}
	dc, err := findDaemon(context.Background(), Env{Getenv: func(k string) string { return vars[k] }}, home)
	if err != nil {
		t.Fatal(err)
	}
	var info server.SessionInfo
	if err := dc.Call(context.Background(), "POST", "/v1/sessions", server.SessionRequest{Rung: "ns"}, &info); err != nil {
		t.Fatal(err)
	}
	code, _, errs := cliWith(t, home, vars, "park", info.SessionID)
	if code == 0 || !strings.Contains(errs, "cannot park") {
		t.Fatalf("park on ns: exit %d, %q: want a refusal", code, errs)
	}
	if code, out, errs := cliWith(t, home, vars, "parked"); code != 0 || out != "" {
		t.Fatalf("parked: exit %d, %q %q: want an empty list", code, out, errs)
	}
	if code, out, _ := cliWith(t, home, vars, "parked", "--json"); code != 0 || !strings.Contains(out, `"parked": []`) {
		t.Fatalf("parked --json: exit %d, %q", code, out)
	}
	if code, _, errs := cliWith(t, home, vars, "resume", info.SessionID); code == 0 || !strings.Contains(errs, "no parked session") {
		t.Fatalf("resume of a live session: exit %d, %q", code, errs)
	}
	var sr struct {
		Transcript string `json:"transcript"`
	}
	if err := dc.Call(context.Background(), "POST", "/v1/sessions/"+info.SessionID+"/shell", server.ShellRequest{Command: "echo alive"}, &sr); err != nil || sr.Transcript != "alive\n" {
		t.Fatalf("the session after a refused park: %v %+v", err, sr)
	}
}
