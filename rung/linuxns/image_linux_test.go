package linuxns

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/image"
	"github.com/dryexec/dryexec/internal/imagetest"
	"github.com/dryexec/dryexec/internal/testreq"
)

// testImage builds an image of the host's sh, cat and rm (with their
// libraries), an /app with files over two layers (the second deletes one of
// the first's), pushes it to a registry on loopback and pulls it into a
// fresh cache. It returns the cache and the reference.
func testImage(t *testing.T, extra ...v1.Layer) (*image.Cache, string) {
	t.Helper()
	testreq.NeedRoot(t)
	requireNS(t)
	layers := []v1.Layer{
		imagetest.Tools(t, "cat", "rm"),
		imagetest.Layer(t, imagetest.Entry{Name: "app/", Type: tar.TypeDir},
			imagetest.Entry{Name: "app/hello.txt", Body: []byte("hello\n")},
			imagetest.Entry{Name: "app/gone.txt", Body: []byte("x\n")},
			imagetest.Entry{Name: "app/hidden.txt", Body: []byte("the next layer deletes me\n")},
			imagetest.Entry{Name: "tmp/", Type: tar.TypeDir, Mode: 0o1777}),
		imagetest.Layer(t, imagetest.Entry{Name: "app/.wh.hidden.txt"}),
	}
	img := imagetest.Image(t, imagetest.Config{Env: []string{"PATH=/bin", "IMGVAR=from-image", "BOTH=image"}, WorkingDir: "/app"},
		append(layers, extra...)...)
	ref := imagetest.Registry(t) + "/test/tools:1"
	imagetest.Push(t, ref, img)
	c, err := image.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, ref
}

func imageRoot(t *testing.T, c *image.Cache, ref string) *dryexec.ImageRoot {
	t.Helper()
	img, release, pulled, err := c.Ensure(context.Background(), ref, image.PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	if !pulled {
		t.Fatal("the first use did not pull")
	}
	return c.Root(ref, img)
}

// TestImageTrial: a trial on an image sees the image, not the host, starts
// in its WorkingDir with its Env under the caller's, and its delta lists
// exactly what the command changed in the image.
func TestImageTrial(t *testing.T) {
	c, ref := testImage(t)
	root := imageRoot(t, c, ref)
	a := dryexec.ImageAction(dryexec.Action{
		Argv: []string{"sh", "-c", `pwd; echo "$IMGVAR $BOTH"; cat hidden.txt 2>/dev/null || echo no-hidden;
			cat /etc/hostname 2>/dev/null || echo no-host-etc
			echo new > new.txt; echo more >> hello.txt; rm gone.txt; echo t > /tmp/t`},
		Env: map[string]string{"BOTH": "caller"}}, root)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := (&Rung{}).Trial(ctx, dryexec.TrialSpec{Action: a, Image: root})
	if err != nil {
		t.Fatal(err)
	}
	validate(t, d)
	if d.Process.ExitCode != 0 {
		t.Fatalf("exit %d: %s", d.Process.ExitCode, d.Process.Stderr)
	}
	if want := "/app\nfrom-image caller\nno-hidden\nno-host-etc\n"; d.Process.Stdout != want {
		t.Errorf("stdout %q, want %q", d.Process.Stdout, want)
	}
	var got []string
	for _, f := range d.Files {
		got = append(got, string(f.Op)+" "+f.Path)
	}
	want := []string{"create /app/new.txt", "delete /app/gone.txt", "modify /app/hello.txt", "create /tmp/t"}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("delta %q, want exactly %q", got, want)
	}
	for _, f := range d.Files {
		if f.Path == "/app/hello.txt" && f.BeforeSHA256 != sha256hex([]byte("hello\n")) {
			t.Errorf("hello.txt compared with %s, not the image's", f.BeforeSHA256)
		}
	}
	if d.Image == nil || d.Image.Digest != root.Digest || d.Image.Workspace != "/app" {
		t.Errorf("delta's image %+v, want digest %s, workspace /app", d.Image, root.Digest)
	}
	if _, err := os.Stat("/app/new.txt"); err == nil {
		t.Error("the trial wrote the host's /app")
	}
}

// TestImageTrialRefusals: what an image trial refuses, each with its typed
// error: a cwd the image lacks; more layers than overlayfs stacks.
func TestImageTrialRefusals(t *testing.T) {
	c, ref := testImage(t)
	root := imageRoot(t, c, ref)
	ctx := context.Background()
	_, err := (&Rung{}).Trial(ctx, dryexec.TrialSpec{Image: root,
		Action: dryexec.Action{Argv: []string{"sh", "-c", "true"}, Cwd: "/nowhere"}})
	if !errors.Is(err, dryexec.ErrBadAction) {
		t.Errorf("cwd missing in the image: %v, want ErrBadAction", err)
	}
	// Layers of a rootless cache (userxattr form) are never mounted as
	// root's: their opaque dirs would not be honoured.
	other := *root
	other.UserXattr = true
	_, err = (&Rung{}).Trial(ctx, dryexec.TrialSpec{Image: &other, Action: dryexec.Action{Argv: []string{"true"}, Cwd: "/"}})
	var iu *dryexec.IsolationUnavailableError
	if !errors.As(err, &iu) {
		t.Errorf("root on a userxattr cache's layers: %v, want an *IsolationUnavailableError", err)
	}
	deep := *root
	for len(deep.Layers) <= dryexec.MaxImageLayers {
		deep.Layers = append(deep.Layers, root.Layers[len(root.Layers)-1])
	}
	_, err = (&Rung{}).Trial(ctx, dryexec.TrialSpec{Image: &deep, Action: dryexec.Action{Argv: []string{"true"}, Cwd: "/"}})
	var tm *dryexec.TooManyLayersError
	if !errors.As(err, &tm) || !errors.Is(err, dryexec.ErrTooManyLayers) || tm.Layers != len(deep.Layers) {
		t.Errorf("%d layers: %v, want a *TooManyLayersError", len(deep.Layers), err)
	}
}

// TestImageManyLayers: an image of 300 layers (past what mount(2)'s one
// page of options could name) runs, each layer's file visible.
func TestImageManyLayers(t *testing.T) {
	const n = 300
	var extra []v1.Layer
	for i := range n {
		extra = append(extra, imagetest.Layer(t, imagetest.Entry{Name: fmt.Sprintf("l/%03d", i), Body: []byte("x")}))
	}
	c, ref := testImage(t, extra...)
	root := imageRoot(t, c, ref)
	if len(root.Layers) != n+3 {
		t.Fatalf("%d layers", len(root.Layers))
	}
	a := dryexec.ImageAction(dryexec.Action{Argv: []string{"sh", "-c", "cd /l && set -- * && echo $#"}}, root)
	d, err := (&Rung{}).Trial(context.Background(), dryexec.TrialSpec{Action: a, Image: root})
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(d.Process.Stdout) != fmt.Sprint(n) || len(d.Files) != 0 {
		t.Errorf("stdout %q (stderr %q), %d changes; want %d files seen and no change", d.Process.Stdout, d.Process.Stderr, len(d.Files), n)
	}
}
