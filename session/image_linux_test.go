package session

import (
	"archive/tar"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/image"
	"github.com/dryexec/dryexec/internal/imagetest"
	"github.com/dryexec/dryexec/internal/testreq"
)

// TestImageSession: a session on an image pulled from a registry on
// loopback sees the image's files and Env (the caller's names winning), not
// the host's, and its diff is the workspace's as on the host's view.
func TestImageSession(t *testing.T) {
	testreq.NeedRoot(t)
	img := imagetest.Image(t, imagetest.Config{Env: []string{"PATH=/bin", "IMGVAR=image", "BOTH=image"}, WorkingDir: "/app"},
		imagetest.Tools(t, "cat"),
		imagetest.Layer(t, imagetest.Entry{Name: "app/", Type: tar.TypeDir}, imagetest.Entry{Name: "app/hello.txt", Body: []byte("hello from the image\n")}))
	ref := imagetest.Registry(t) + "/test/session:1"
	imagetest.Push(t, ref, img)
	c, err := image.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, release, _, err := c.Ensure(testCtx(t), ref, image.PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	root := c.Root(ref, got)
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"default env", nil, "image image\n"},
		{"caller's env", map[string]string{"BOTH": "caller", "PATH": "/bin"}, "image caller\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(testCtx(t), Options{Rung: "ns", Image: root, Env: tc.env})
			testreq.Need(t, testreq.NS, err)
			defer s.Close()
			r, err := s.Shell(testCtx(t), `echo "$IMGVAR $BOTH"; cat /app/hello.txt; cat /etc/hostname 2>/dev/null || echo no-host; echo made > out.txt`, 0)
			if err != nil {
				t.Fatal(err)
			}
			if want := tc.want + "hello from the image\nno-host\n"; r.Stdout != want || r.ExitCode != 0 {
				t.Errorf("exit %d, stdout %q (stderr %q), want %q", r.ExitCode, r.Stdout, r.Stderr, want)
			}
			d, err := s.Diff(testCtx(t), false)
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Writes) != 1 || string(d.Writes["out.txt"]) != "made\n" || len(d.Deletes) != 0 {
				t.Errorf("diff %+v, want out.txt only", d)
			}
		})
	}
	// A rung without images says so, typed.
	_, err = Open(context.Background(), Options{Rung: "host", Image: root})
	var iu *dryexec.IsolationUnavailableError
	if !errors.As(err, &iu) || iu.Rung != "host" || !strings.Contains(err.Error(), "image") {
		t.Errorf("image session on host: %v, want IsolationUnavailable naming host", err)
	}
}
