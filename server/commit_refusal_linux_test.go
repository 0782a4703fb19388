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

// TestCommitRefusalsAPI: the API commits through the same checks as the
// CLI. A trial decided block is refused (403 blocked) and so is a stored
// delta edited after it was signed (409 unverified); neither touches the
// host.
func TestCommitRefusalsAPI(t *testing.T) {
	requireNS(t)
	d := startDaemon(t, server.Config{}, server.HandlerOptions{})
	wd, elsewhere := t.TempDir(), t.TempDir()
	pol := json.RawMessage(`{"rules": [{"name": "no", "expr": "true", "result": "block", "reason": "never"}]}`)
	var blocked dryexec.StateDelta
	d.ok(t, "POST", "/v1/trials", server.TrialRequest{Argv: []string{"sh", "-c", "echo a > a"}, Cwd: wd, Policy: pol}, http.StatusCreated, &blocked)
	if blocked.Decision.Choice != "block" {
		t.Fatalf("decision %+v", blocked.Decision)
	}
	if e := d.fails(t, "POST", "/v1/trials/"+blocked.TrialID+"/commit", nil, http.StatusForbidden, "blocked"); !strings.Contains(e.Message, "never") {
		t.Errorf("message %q does not give the reason", e.Message)
	}

	tampered := d.trial(t, wd, "sh", "-c", "echo b > b")
	stored := filepath.Join(d.home, "trials", tampered.TrialID, "delta.json")
	b, err := os.ReadFile(stored)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(b), filepath.Join(wd, "b"), filepath.Join(elsewhere, "b"), 1)
	os.WriteFile(stored, []byte(edited), 0o600)
	d.fails(t, "POST", "/v1/trials/"+tampered.TrialID+"/commit", nil, http.StatusConflict, "unverified")
	for _, dir := range []string{wd, elsewhere} {
		if ents, _ := os.ReadDir(dir); len(ents) > 0 {
			t.Errorf("%s holds %v after refused commits", dir, ents)
		}
	}
}
