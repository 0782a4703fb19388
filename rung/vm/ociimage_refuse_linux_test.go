package vm

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
)

// TestImageRefusals: what the vm rung refuses of an image before any VM
// boots, each typed: an image
// from a rootless cache (its opaque dirs are user.overlay.*, which root's
// overlay ignores: the image's deleted directory contents would show
// again), and more layers than overlayfs stacks; resuming a parked
// session on an image whose park dir does not say which erofs drive the
// saved VM had (its restore needs that very file again).
func TestImageRefusals(t *testing.T) {
	img := &dryexec.ImageRoot{Ref: "x", Digest: "sha256:" + strings.Repeat("0", 64), Layers: []string{"/l"}}
	if _, err := (&Rung{}).Resume(context.Background(), dryexec.SandboxSpec{Image: img}, t.TempDir()); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), ParkImageFile) {
		t.Errorf("resuming a session on an image without %s: %v, want that it is missing", ParkImageFile, err)
	}
	var iu *dryexec.IsolationUnavailableError
	rootless := *img
	rootless.UserXattr = true
	if _, err := sandboxFor(dryexec.TrialSpec{Image: &rootless}); !errors.As(err, &iu) {
		t.Errorf("an image of a rootless cache: %v, want an IsolationUnavailableError", err)
	}
	deep := *img
	deep.Layers = make([]string, dryexec.MaxImageLayers+1)
	if _, err := sandboxFor(dryexec.TrialSpec{Image: &deep}); !errors.Is(err, dryexec.ErrTooManyLayers) {
		t.Errorf("%d layers: %v, want ErrTooManyLayers", len(deep.Layers), err)
	}
	sb, err := sandboxFor(dryexec.TrialSpec{Image: img, NetCADir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(sb.mounts) != 1 || sb.mounts[0].Path != "/" || len(sb.cover.Masks) != 0 || len(sb.image) != 1 {
		t.Errorf("the sandbox of an image: %+v, want one mount at /, the layers, no masks", sb)
	}
}
