package server_test

import (
	"archive/tar"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/imagetest"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/server"
	"github.com/dryexec/dryexec/wire"
)

// TestImageAPI: over the real API, a trial and a session on an image pulled
// from a registry on loopback; commit refused without `to` (409
// image_commit, the target untouched) and mapped with it; a missing image
// and a bad reference refused with their codes.
func TestImageAPI(t *testing.T) {
	testreq.NeedRoot(t)
	requireNS(t)
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	img := imagetest.Image(t, imagetest.Config{Env: []string{"PATH=/bin", "WHO=image"}, WorkingDir: "/src"},
		imagetest.Tools(t, "cat"),
		imagetest.Layer(t, imagetest.Entry{Name: "src/", Type: tar.TypeDir}, imagetest.Entry{Name: "src/a.txt", Body: []byte("a\n")}))
	reg := imagetest.Registry(t)
	ref := reg + "/api/img:1"
	imagetest.Push(t, ref, img)
	d := startDaemon(t, server.Config{Pool: -1}, server.HandlerOptions{})

	var delta dryexec.StateDelta
	d.ok(t, "POST", "/v1/trials", server.TrialRequest{Image: ref, Argv: []string{"sh", "-c", `echo "$WHO"; echo b >> a.txt`}}, http.StatusCreated, &delta)
	if delta.Process.Stdout != "image\n" || len(delta.Files) != 1 || delta.Files[0].Path != "/src/a.txt" || delta.Image == nil {
		t.Fatalf("trial on the image: stdout %q stderr %q files %+v image %+v", delta.Process.Stdout, delta.Process.Stderr, delta.Files, delta.Image)
	}
	target := t.TempDir()
	if err := os.WriteFile(filepath.Join(target, "a.txt"), []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cp := "/v1/trials/" + delta.TrialID + "/commit"
	d.fails(t, "POST", cp, server.CommitRequest{Force: true}, http.StatusConflict, "image_commit")
	if b, _ := os.ReadFile(filepath.Join(target, "a.txt")); string(b) != "a\n" {
		t.Fatalf("a refused commit changed the target: %q", b)
	}
	d.ok(t, "POST", cp, server.CommitRequest{Force: true, To: target}, http.StatusOK, nil)
	if b, _ := os.ReadFile(filepath.Join(target, "a.txt")); string(b) != "a\nb\n" {
		t.Fatalf("target after commit: %q", b)
	}

	var sess server.SessionInfo
	d.ok(t, "POST", "/v1/sessions", server.SessionRequest{Image: ref}, http.StatusCreated, &sess)
	sp := "/v1/sessions/" + sess.SessionID
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
	d.ok(t, "DELETE", sp, nil, http.StatusOK, nil)

	d.fails(t, "POST", "/v1/trials", server.TrialRequest{Image: reg + "/api/missing:1", Argv: []string{"true"}}, http.StatusUnprocessableEntity, "image_unavailable")
	d.fails(t, "POST", "/v1/sessions", server.SessionRequest{Image: "oci:"}, http.StatusBadRequest, "bad_request")
}

// pythonTestImage writes the image sdk/python/tests/test_images.py runs on
// as an OCI layout and returns its reference.
func pythonTestImage(t *testing.T) string {
	img := imagetest.Image(t, imagetest.Config{Env: []string{"PATH=/bin", "WHO=image"}, WorkingDir: "/src"},
		imagetest.Tools(t, "cat"),
		imagetest.Layer(t, imagetest.Entry{Name: "src/", Type: tar.TypeDir}, imagetest.Entry{Name: "src/a.txt", Body: []byte("a\n")}))
	return imagetest.Layout(t, filepath.Join(t.TempDir(), "layout"), img)
}
