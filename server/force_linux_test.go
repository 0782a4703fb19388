package server_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/server"
)

// TestCommitForceOverridesBlock: the API's force is a person's decision: it
// commits a trial the policy blocked, which without it is refused (403
// blocked), and the override is recorded with the trial.
func TestCommitForceOverridesBlock(t *testing.T) {
	requireNS(t)
	d := startDaemon(t, server.Config{}, server.HandlerOptions{})
	wd := t.TempDir()
	pol := json.RawMessage(`{"rules": [{"name": "no", "expr": "true", "result": "block", "reason": "never"}]}`)
	var blocked dryexec.StateDelta
	d.ok(t, "POST", "/v1/trials", server.TrialRequest{Argv: []string{"sh", "-c", "echo a > a"}, Cwd: wd, Policy: pol}, http.StatusCreated, &blocked)
	d.fails(t, "POST", "/v1/trials/"+blocked.TrialID+"/commit", server.CommitRequest{}, http.StatusForbidden, "blocked")
	if _, err := os.Stat(filepath.Join(wd, "a")); err == nil {
		t.Fatal("a refused commit changed the host")
	}
	// Who overrode is the interface's to say, not the caller's: a "by" in
	// the body is refused, as any unknown field.
	for _, forged := range []string{`{"force": true, "by": "alice at the terminal"}`, `{"force": true, "By": "mcp"}`} {
		d.fails(t, "POST", "/v1/trials/"+blocked.TrialID+"/commit", []byte(forged), http.StatusBadRequest, "bad_request")
	}
	d.ok(t, "POST", "/v1/trials/"+blocked.TrialID+"/commit", server.CommitRequest{Force: true}, http.StatusOK, nil)
	if b, err := os.ReadFile(filepath.Join(wd, "a")); err != nil || string(b) != "a\n" {
		t.Fatalf("forced commit: %q %v", b, err)
	}
	st, err := d.svc.Store().StateOf(blocked.TrialID)
	if err != nil || st.Override == nil || st.Override.Decision != "block" || !strings.HasPrefix(st.Override.By, "api, dryexec running as ") {
		t.Fatalf("override not recorded: %+v %v", st, err)
	}
}
