package image

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/rootless"
)

// TestRootless re-runs the cache's tests as an unprivileged user (uid
// 65534), whose cache is in the userxattr form: the on-disk form and the
// view (TestAwkwardLayers), every hostile layer, concurrent pulls, a pull
// cancelled or killed mid-layer, rm and prune, the form's mark.
func TestRootless(t *testing.T) {
	rootless.Rerun(t, "^(TestAwkwardLayers|TestHostileLayers|TestConcurrentPulls|TestCancelMidUnpack|TestCrashMidUnpack|"+
		"TestRemoveAndPrune|TestUseHoldsLayers|TestPullSources|TestPullErrors|TestCacheForm)$", 5*time.Minute)
}

// TestCacheForm: a new cache is marked with its caller's form; a cache in
// the other form is refused (ErrUnsupportedHost), before anything in it is
// touched; a cache of an older dryexec (layers, no mark) is root's.
func TestCacheForm(t *testing.T) {
	needRoot(t)
	want, other := FormRoot, FormUserXattr
	if os.Geteuid() != 0 {
		want, other = other, want
	}
	dir := t.TempDir()
	c, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Form() != want {
		t.Errorf("a new cache's form is %q, want %q", c.Form(), want)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "form")); err != nil || string(b) != string(want)+"\n" {
		t.Errorf("form mark %q, %v", b, err)
	}
	if c, err := Open(dir, nil); err != nil || c.Form() != want {
		t.Errorf("reopened: %v, %v", c, err)
	}
	if root := c.Root("x", Image{}); root.UserXattr != (want == FormUserXattr) {
		t.Errorf("ImageRoot.UserXattr %v for a %s cache", root.UserXattr, want)
	}

	dir = t.TempDir()
	os.WriteFile(filepath.Join(dir, "form"), []byte(string(other)+"\n"), 0o600)
	os.MkdirAll(filepath.Join(dir, "tmp", "left"), 0o700)
	if _, err := Open(dir, nil); !errors.Is(err, ErrUnsupportedHost) {
		t.Errorf("opening a %s cache as a %s caller: %v, want ErrUnsupportedHost", other, want, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "tmp", "left")); err != nil {
		t.Errorf("the refused cache was swept: %v", err)
	}

	dir = t.TempDir()
	os.MkdirAll(filepath.Join(dir, "layers", "0123"), 0o700)
	_, err = Open(dir, nil)
	if want == FormRoot && err != nil || want == FormUserXattr && !errors.Is(err, ErrUnsupportedHost) {
		t.Errorf("a cache of layers without a mark (an older root's) opened by a %s caller: %v", want, err)
	}
}
