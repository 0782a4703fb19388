package cli

import (
	"archive/tar"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dryexec/dryexec/internal/imagetest"
	"github.com/dryexec/dryexec/internal/testreq"
)

// testImageRef pushes an image (the host's sh, cat and mkdir with their
// libraries; /app/hello.txt; Env and WorkingDir /app) to a registry on
// loopback.
func testImageRef(t *testing.T) string {
	t.Helper()
	testreq.NeedRoot(t)
	requireNS(t)
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	img := imagetest.Image(t, imagetest.Config{Env: []string{"PATH=/bin", "GREETING=image"}, WorkingDir: "/app"},
		imagetest.Tools(t, "cat", "mkdir"),
		imagetest.Layer(t, imagetest.Entry{Name: "app/", Type: tar.TypeDir}, imagetest.Entry{Name: "app/hello.txt", Body: []byte("hello\n")},
			imagetest.Entry{Name: "etc/", Type: tar.TypeDir}, imagetest.Entry{Name: "etc/motd", Body: []byte("image motd\n")},
			imagetest.Entry{Name: "tmp/", Type: tar.TypeDir, Mode: 0o1777}))
	ref := imagetest.Registry(t) + "/team/app:1"
	imagetest.Push(t, ref, img)
	return ref
}

// TestRunImage: `run --image` pulls on first use (and not after), runs in
// the image's WorkingDir with its Env under --env's, never the host's
// allowlisted PATH, and reports exactly what the command changed in the
// image.
func TestRunImage(t *testing.T) {
	ref := testImageRef(t)
	home := t.TempDir()
	script := `pwd; echo "$GREETING $EXTRA $PATH"; echo more >> hello.txt; mkdir sub; echo new > sub/new.txt; echo x > /etc/motd`
	code, out, errs := cli(t, home, "run", "--json", "-q", "--image", ref, "--env", "EXTRA=caller", "--", "sh", "-c", script)
	if code == ExitInternal || code == ExitUsage || code == ExitRefused {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(errs, "pulled "+ref) {
		t.Errorf("first use did not say it pulled: %q", errs)
	}
	d := decode(t, out)
	if want := "/app\nimage caller /bin\n"; d.Process.Stdout != want {
		t.Errorf("stdout %q, want %q (stderr %q)", d.Process.Stdout, want, d.Process.Stderr)
	}
	var got []string
	for _, f := range d.Files {
		got = append(got, string(f.Op)+" "+f.Path)
	}
	slices.Sort(got)
	want := []string{"create /app/sub/new.txt", "mkdir /app/sub", "modify /app/hello.txt", "modify /etc/motd"}
	if !slices.Equal(got, want) {
		t.Errorf("delta %q, want %q", got, want)
	}
	if d.Image == nil || d.Image.Ref != ref || d.Image.Workspace != "/app" {
		t.Errorf("image %+v", d.Image)
	}
	// Cached now: no second pull.
	code, _, errs = cli(t, home, "run", "-q", "--no-store", "--image", ref, "--", "sh", "-c", "true")
	if code != 0 || strings.Contains(errs, "pulled") {
		t.Errorf("second use: exit %d, %q", code, errs)
	}
}

// TestCommitImageTrial: a trial on an image is refused without --to and the
// host is untouched; with --to DIR only what it changed beneath its
// workspace lands, beneath DIR, and a trial on the host's view refuses --to.
func TestCommitImageTrial(t *testing.T) {
	ref := testImageRef(t)
	home, dir := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := cli(t, home, "run", "--json", "-q", "--image", ref, "--", "sh", "-c",
		`echo more >> hello.txt; mkdir sub; echo new > sub/new.txt; echo x > /etc/motd; echo t > /tmp/t`)
	if code == ExitInternal || code == ExitUsage || code == ExitRefused {
		t.Fatalf("exit %d: %s", code, errs)
	}
	d := decode(t, out)
	before := snapshot(t, dir)
	code, _, errs = cli(t, home, "commit", "--force", d.TrialID)
	if code != ExitRefused || !strings.Contains(errs, "--to DIR") {
		t.Errorf("commit without --to: exit %d, %q", code, errs)
	}
	if after := snapshot(t, dir); !slices.Equal(before, after) {
		t.Errorf("a refused commit changed the target: %q → %q", before, after)
	}
	for _, p := range []string{"/app/hello.txt", "/app/sub", "/tmp/t"} {
		if _, err := os.Lstat(p); err == nil && p != "/tmp/t" {
			t.Errorf("a refused commit made the host's %s", p)
		}
	}
	code, stdout, errs := cli(t, home, "commit", "--force", "--to", dir, d.TrialID)
	if code != 0 {
		t.Fatalf("commit --to: exit %d, %q", code, errs)
	}
	if !strings.Contains(stdout, "3 changes applied") || !strings.Contains(errs, "2 changes of "+d.TrialID+" outside its workspace") {
		t.Errorf("commit --to said %q / %q", stdout, errs)
	}
	want := []string{"hello.txt=hello\nmore\n", "sub/", "sub/new.txt=new\n"}
	if got := snapshot(t, dir); !slices.Equal(got, want) {
		t.Errorf("target after commit %q, want %q", got, want)
	}
	if b, err := os.ReadFile("/tmp/t"); err == nil && string(b) == "t\n" {
		t.Error("a change outside the workspace was committed to the host")
	}
	// A trial on the host's view has no --to.
	_, out, _ = cli(t, home, "run", "--json", "-q", "-C", t.TempDir(), "--", "sh", "-c", "echo a > a")
	h := decode(t, out)
	if code, _, errs = cli(t, home, "commit", "--force", "--to", dir, h.TrialID); code != ExitRefused || !strings.Contains(errs, "only for a trial on an image") {
		t.Errorf("--to on a host trial: exit %d, %q", code, errs)
	}
}

// snapshot lists dir's tree: "name=content" for files, "name/" for dirs.
func snapshot(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if e.IsDir() {
			out = append(out, rel+"/")
			return nil
		}
		b, _ := os.ReadFile(p)
		out = append(out, rel+"="+string(b))
		return nil
	})
	return out
}
