package image

import (
	"os"
	"testing"

	"github.com/dryexec/dryexec/guest"
	"github.com/dryexec/dryexec/internal/testreq"
)

// TestMain lets this test binary serve as dryexec's guest: a caller that is
// not root mounts an image's view through a helper role of it
// (linuxns.ImageView, TestAwkwardLayers).
func TestMain(m *testing.M) {
	guest.MaybeMain(os.Args)
	testreq.OwnMountNamespace()
	os.Exit(m.Run())
}
