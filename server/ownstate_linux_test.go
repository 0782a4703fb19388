package server_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/ownstate"
	"github.com/dryexec/dryexec/server"
	"github.com/dryexec/dryexec/wire"
)

// TestDaemonOwnStateHidden: a trial and a session of the daemon, asking for
// no default masks, cannot read, list or change the daemon's home (its
// token, another trial's stored delta and blobs, the receipt key) nor reach
// its socket, by any route of ownstate.Routes; warm sandboxes (made before
// the socket existed) included. The daemon's files are unchanged.
func TestDaemonOwnStateHidden(t *testing.T) {
	requireNS(t)
	d := startDaemon(t, server.Config{Pool: 1, SessionPool: 1}, server.HandlerOptions{})
	ownstate.MakeHome(t, d.home)
	work := t.TempDir()
	// Another trial, stored with its delta and the content it wrote.
	const secret = "SECRET-OF-ANOTHER-TRIAL-31c9"
	first := d.trial(t, work, "/bin/sh", "-c", "printf "+secret+" > f")
	key, err := os.ReadFile(filepath.Join(d.home, "receipt-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	firstDelta := filepath.Join(d.home, "trials", first.TrialID, "delta.json")
	watched := []string{filepath.Join(d.home, "serve/token"), filepath.Join(d.home, "trials/tr_other/delta.json"), firstDelta}
	before := readAll(t, watched)
	script := ownstate.Routes(d.home, d.sock,
		`cat $H/trials/*/delta.json; find $H/trials -type f -exec cat {} +`,
		`/usr/bin/python3 -c "import http.client,socket; c=http.client.HTTPConnection('x'); s=socket.socket(socket.AF_UNIX); s.connect('`+d.sock+`'); c.sock=s; c.request('GET','/v1/trials'); print('connected-to-the-socket', c.getresponse().read())"`)
	check := func(what, out string) {
		t.Helper()
		ownstate.Check(t, out, 0)
		for _, leak := range []string{secret, first.TrialID, "PRIVATE KEY", string(key)} {
			if strings.Contains(out, leak) {
				t.Errorf("%s: the sandbox got %q; output:\n%s", what, leak, out)
			}
		}
	}

	var delta dryexec.StateDelta
	d.ok(t, "POST", "/v1/trials", server.TrialRequest{Argv: []string{"/bin/sh", "-c", script}, Cwd: work, NoDefaultMasks: true}, http.StatusCreated, &delta)
	check("trial", delta.Process.Stdout)
	for _, f := range delta.Files {
		if strings.HasPrefix(f.Path, d.home+"/") || f.Path == d.home || f.Path == d.sock {
			t.Errorf("the trial's delta changes the daemon's own state: %s %s", f.Op, f.Path)
		}
	}

	var info server.SessionInfo
	d.ok(t, "POST", "/v1/sessions", server.SessionRequest{Rung: "ns", NoDefaultMasks: true}, http.StatusCreated, &info)
	var sr wire.ShellResult
	d.ok(t, "POST", "/v1/sessions/"+info.SessionID+"/shell", server.ShellRequest{Command: script}, http.StatusOK, &sr)
	check("session", sr.Transcript)
	d.ok(t, "DELETE", "/v1/sessions/"+info.SessionID, nil, http.StatusOK, nil)

	if after := readAll(t, watched); strings.Join(after, "\x00") != strings.Join(before, "\x00") {
		t.Errorf("the daemon's files changed: %q → %q", before, after)
	}
}

func readAll(t *testing.T, paths []string) []string {
	t.Helper()
	out := make([]string, len(paths))
	for i, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = string(b)
	}
	return out
}
