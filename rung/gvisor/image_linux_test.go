package gvisor_test

import (
	"testing"

	"github.com/dryexec/dryexec/internal/rungcompare"
	"github.com/dryexec/dryexec/rung/gvisor"
)

// TestImageSameDeltaAsNS runs the same commands on an image with every
// awkward layer case (whiteouts, an opaque dir, setuid and setgid bits,
// absolute and dangling symlinks, skipped device nodes, a FIFO), pulled
// from a registry on loopback, through `dryexec run --image` on ns and on
// gvisor, and requires the same delta over the image, field by field.
func TestImageSameDeltaAsNS(t *testing.T) {
	requireBoth(t)
	rungcompare.ImageSameDeltaAsNS(t, gvisor.Name, rungcompare.AwkwardImage(t), rungcompare.ImageCases())
}

// TestImageSessionSameAsNS runs the same sessions on that image on ns and
// on gvisor (the workspace pushed over the image, commands that change it
// and read the image around it) and requires the same results and diffs.
func TestImageSessionSameAsNS(t *testing.T) {
	requireBoth(t)
	root := rungcompare.PullImage(t, rungcompare.AwkwardImage(t))
	rungcompare.SessionSameAsNS(t, gvisor.Name, rungcompare.ImageSessionCases(root))
}
