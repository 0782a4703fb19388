package server_test

import (
	"archive/tar"
	"context"
	"net/http"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/imagetest"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/gvisor"
	"github.com/dryexec/dryexec/server"
	"github.com/dryexec/dryexec/wire"
)

// TestImageAPIRungs: over the real API, a trial and a session on an image
// on each rung that holds one (the daemon pulls the image into its store's
// cache once): the image's Env and WorkingDir, the change in the delta over
// the image with its image section, the session's diff of its workspace.
func TestImageAPIRungs(t *testing.T) {
	testreq.NeedRoot(t)
	requireNS(t)
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	img := imagetest.Image(t, imagetest.Config{Env: []string{"PATH=/bin", "WHO=image"}, WorkingDir: "/src"},
		imagetest.Tools(t, "cat"),
		imagetest.Layer(t, imagetest.Entry{Name: "src/", Type: tar.TypeDir}, imagetest.Entry{Name: "src/a.txt", Body: []byte("a\n")}))
	ref := imagetest.Registry(t) + "/api/rungs:1"
	imagetest.Push(t, ref, img)
	d := startDaemon(t, server.Config{Pool: -1}, server.HandlerOptions{})
	for _, rung := range []string{"ns", gvisor.Name} {
		t.Run(rung, func(t *testing.T) {
			if rung == gvisor.Name {
				testreq.Need(t, testreq.GVisor, (&gvisor.Rung{}).Available(context.Background()))
			}
			var delta dryexec.StateDelta
			d.ok(t, "POST", "/v1/trials", server.TrialRequest{Rung: rung, Image: ref, Argv: []string{"sh", "-c", `echo "$WHO $PWD"; echo b >> a.txt`}},
				http.StatusCreated, &delta)
			if delta.Rung != rung || delta.Process.Stdout != "image /src\n" || len(delta.Files) != 1 || delta.Files[0].Path != "/src/a.txt" ||
				delta.Files[0].BeforeSHA256 == "" || delta.Image == nil || delta.Image.Workspace != "/src" {
				t.Fatalf("trial on the image: rung %s stdout %q stderr %q files %+v image %+v", delta.Rung, delta.Process.Stdout, delta.Process.Stderr, delta.Files, delta.Image)
			}
			var sess server.SessionInfo
			d.ok(t, "POST", "/v1/sessions", server.SessionRequest{Rung: rung, Image: ref}, http.StatusCreated, &sess)
			sp := "/v1/sessions/" + sess.SessionID
			defer d.ok(t, "DELETE", sp, nil, http.StatusOK, nil)
			if sess.Rung != rung {
				t.Errorf("session on %q, want %s", sess.Rung, rung)
			}
			var sh wire.ShellResult
			d.ok(t, "POST", sp+"/shell", server.ShellRequest{Command: `echo "$WHO"; cat /src/a.txt; echo w > w.txt`}, http.StatusOK, &sh)
			if sh.Stdout != "image\na\n" {
				t.Errorf("session shell: %q (%q)", sh.Stdout, sh.Stderr)
			}
			var diff server.DiffResponse
			d.ok(t, "POST", sp+"/diff", nil, http.StatusOK, &diff)
			if string(diff.Writes["w.txt"]) != "w\n" || len(diff.Writes) != 1 {
				t.Errorf("session diff: %+v", diff)
			}
		})
	}
}
