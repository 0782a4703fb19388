package server_test

import (
	"archive/tar"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/imagetest"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/policy"
	"github.com/dryexec/dryexec/server"
)

// TestImageCommitTargetDecided: a trial on an image is decided on the
// image's paths, and where its changes land on the host is named only at
// commit (to), by whoever commits: through MCP, the model. A target the
// daemon's policy denies (here a directory standing in for /etc/cron.d) is
// judged at commit and refused as a block is, until force overrides it
// (recorded); the same kind of trial onto an allowed target commits.
func TestImageCommitTargetDecided(t *testing.T) {
	testreq.NeedRoot(t)
	requireNS(t)
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	img := imagetest.Image(t, imagetest.Config{Env: []string{"PATH=/bin"}, WorkingDir: "/src"},
		imagetest.Tools(t), imagetest.Layer(t, imagetest.Entry{Name: "src/", Type: tar.TypeDir}))
	ref := imagetest.Registry(t) + "/target/img:1"
	imagetest.Push(t, ref, img)
	denied, allowed := t.TempDir(), t.TempDir()
	p := policy.Default()
	p.DeniedMutationTargets = append(p.DeniedMutationTargets, denied+"/**")
	d := startDaemon(t, server.Config{Pool: -1, Policy: &p}, server.HandlerOptions{})
	trial := func(content string) string {
		var delta dryexec.StateDelta
		d.ok(t, "POST", "/v1/trials", server.TrialRequest{Image: ref, Argv: []string{"sh", "-c", "echo '" + content + "' > job"}}, http.StatusCreated, &delta)
		if delta.Decision.Choice == policy.Block || len(delta.Files) != 1 {
			t.Fatalf("the trial on the image: %s, files %+v", delta.Decision.Choice, delta.Files)
		}
		return delta.TrialID
	}

	id := trial("* * * * * root id > /tmp/pwned")
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
	id = trial("ok")
	d.ok(t, "POST", "/v1/trials/"+id+"/commit", server.CommitRequest{To: allowed}, http.StatusOK, nil)
	if b, err := os.ReadFile(filepath.Join(allowed, "job")); err != nil || string(b) != "ok\n" {
		t.Fatalf("commit onto an allowed target: %q %v", b, err)
	}
}
