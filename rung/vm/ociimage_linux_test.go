package vm_test

import (
	"testing"

	"github.com/dryexec/dryexec/internal/rungcompare"
	"github.com/dryexec/dryexec/rung/vm"
)

// TestImageSameDeltaAsNS runs the same commands on an image with every
// awkward layer case (whiteouts, an opaque dir, setuid and setgid bits,
// absolute and dangling symlinks, skipped device nodes, a FIFO), pulled from
// a registry on loopback, through `dryexec run --image` on ns and on vm, and
// requires the same delta over the image, field by field.
func TestImageSameDeltaAsNS(t *testing.T) {
	requireVM(t)
	rungcompare.ImageSameDeltaAsNS(t, vm.Name, rungcompare.AwkwardImage(t), rungcompare.ImageCases())
}
