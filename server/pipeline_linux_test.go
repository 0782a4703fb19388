package server_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/policy"
	"github.com/dryexec/dryexec/receipt"
	"github.com/dryexec/dryexec/server"
)

// TestDaemonAlwaysDecides: a daemon configured with no policy still decides
// every trial (with the default policy) and signs it, stored or not, and a
// request's own policy is applied on top of the default.
func TestDaemonAlwaysDecides(t *testing.T) {
	requireNS(t)
	home := filepath.Join(t.TempDir(), "home")
	svc, err := server.NewService(server.Config{StoreDir: home,
		Getenv: func(k string) string { return map[string]string{"PATH": "/usr/bin:/bin"}[k] }})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	signer, err := receipt.LoadOrCreate(home)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		req  server.TrialRequest
		want string
	}{
		{"default policy", server.TrialRequest{Argv: []string{"sh", "-c", "echo hi > f"}}, policy.AutoCommit},
		{"not stored", server.TrialRequest{Argv: []string{"sh", "-c", "echo hi > f"}, NoStore: true}, policy.AutoCommit},
		{"failing command", server.TrialRequest{Argv: []string{"sh", "-c", "exit 1"}}, policy.Review},
		{"the request's policy", server.TrialRequest{Argv: []string{"sh", "-c", "echo hi > f"},
			Policy: json.RawMessage(`{"denied_mutation_targets": ["**/f"]}`)}, policy.Block},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			req.Cwd = t.TempDir()
			d, err := svc.RunTrial(context.Background(), req, server.TrialHooks{})
			if err != nil {
				t.Fatal(err)
			}
			if d.Decision.Choice != tc.want {
				t.Fatalf("decision %+v, want %s", d.Decision, tc.want)
			}
			doc, _ := json.Marshal(d)
			if _, err := receipt.Verify(doc, signer.PublicKey()); err != nil {
				t.Fatalf("receipt: %v", err)
			}
			_, _, err = svc.Trial(d.TrialID)
			if stored := err == nil; stored == req.NoStore {
				t.Fatalf("stored %v with no_store %v (%v)", stored, req.NoStore, err)
			}
		})
	}
}

// TestServiceRecoverIsExplicit: starting a Service cleans nothing; its Recover, the
// call `dryexec serve` makes at start-up, removes what a killed process left
// (here a half-recorded trial; the SIGKILL test covers sessions and groups).
func TestServiceRecoverIsExplicit(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	partial := filepath.Join(home, "trials", dryexec.NewTrialID()+".partial")
	if err := os.MkdirAll(filepath.Join(partial, "blobs"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(partial, "lock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	svc, err := server.NewService(server.Config{StoreDir: home})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	if _, err := os.Stat(partial); err != nil {
		t.Fatalf("NewService cleaned up by itself: %v", err)
	}
	if err := svc.Recover(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(partial); !os.IsNotExist(err) {
		t.Fatalf("Recover left the half-recorded trial: %v", err)
	}
}
