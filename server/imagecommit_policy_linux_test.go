package server_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/policy"
	"github.com/dryexec/dryexec/receipt"
	"github.com/dryexec/dryexec/server"
)

// TestImageCommitTargetDecided: a trial on an image was decided on the
// image's paths, and where its changes land on the host is named only at
// commit (to), by whoever commits: through MCP, the model. A target the
// daemon's policy denies (here a directory standing in for /etc/cron.d) is
// judged at commit and refused as a block is, until force overrides it
// (recorded); the same trial onto an allowed target commits.
func TestImageCommitTargetDecided(t *testing.T) {
	denied, allowed := t.TempDir(), t.TempDir()
	p := policy.Default()
	p.DeniedMutationTargets = append(p.DeniedMutationTargets, denied+"/**")
	p.AllowedMutationTargets = []string{"*"}
	d := startDaemon(t, server.Config{Policy: &p}, server.HandlerOptions{})
	id := imageTrial(t, d, map[string]string{"/w/job": "* * * * * root sh -c 'id > /tmp/pwned'\n"})

	d.fails(t, "POST", "/v1/trials/"+id+"/commit", server.CommitRequest{To: denied}, http.StatusForbidden, "blocked")
	if ents, _ := os.ReadDir(denied); len(ents) > 0 {
		t.Fatalf("a refused commit wrote %v", ents)
	}
	if st, _ := d.svc.Store().StateOf(id); st.Status != "pending" {
		t.Fatalf("after a refused commit: %+v", st)
	}
	d.ok(t, "POST", "/v1/trials/"+id+"/commit", server.CommitRequest{To: denied, Force: true}, http.StatusOK, nil)
	st, err := d.svc.Store().StateOf(id)
	if err != nil || st.Override == nil || st.Override.Decision != "block" ||
		!strings.Contains(strings.Join(st.Override.Reasons, "\n"), "decided again for its target "+denied) {
		t.Fatalf("override %+v (%v), want the target's block recorded", st.Override, err)
	}
	if _, err := os.Stat(filepath.Join(denied, "job")); err != nil {
		t.Fatalf("forced commit: %v", err)
	}
	// Onto a target the policy allows, nothing stands in the way.
	id = imageTrial(t, d, map[string]string{"/w/job": "ok\n"})
	d.ok(t, "POST", "/v1/trials/"+id+"/commit", server.CommitRequest{To: allowed}, http.StatusOK, nil)
	if b, err := os.ReadFile(filepath.Join(allowed, "job")); err != nil || string(b) != "ok\n" {
		t.Fatalf("commit onto an allowed target: %q %v", b, err)
	}
}

// imageTrial records in d's store a trial on an image (workspace /w)
// creating files, decided auto_commit and signed with the install's key, as
// the daemon records one; it returns the trial's id.
func imageTrial(t *testing.T, d *daemon, files map[string]string) string {
	t.Helper()
	s := d.svc.Store()
	signer, err := receipt.LoadOrCreate(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	id := dryexec.NewTrialID()
	tr, err := s.Begin(id)
	if err != nil {
		t.Fatal(err)
	}
	dl := &dryexec.StateDelta{TrialID: id, Rung: "ns", Action: dryexec.Action{Argv: []string{"sh"}, Cwd: "/w"},
		Image:    &dryexec.DeltaImage{Ref: "example/img:1", Digest: "sha256:" + strings.Repeat("0", 64), Workspace: "/w"},
		Decision: dryexec.Decision{Choice: policy.AutoCommit, Reasons: []string{"info: nothing needs a person"}}}
	for p, c := range files {
		sha, n, err := tr.PutBlob(strings.NewReader(c))
		if err != nil {
			t.Fatal(err)
		}
		dl.Files = append(dl.Files, dryexec.FileChange{Path: p, Op: dryexec.OpCreate, Kind: dryexec.KindFile, Mode: "0644",
			Size: n, SHA256: sha, UID: os.Getuid(), GID: os.Getgid()})
	}
	dl.Normalize()
	dl.ComputeTotals()
	if err := signer.Sign(dl); err != nil {
		t.Fatal(err)
	}
	if err := tr.Save(dl); err != nil {
		t.Fatal(err)
	}
	return id
}
