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
	cases := append(rungcompare.ImageCases(),
		// Files named as a layer's marks are files: the VM sends its upper
		// dir back in overlay's own form, not a layer's, so wh/.wh.a is
		// not a deletion of wh/a, wh/.wh..wh..opq does not hide wh's
		// lower entries.
		rungcompare.Case{Name: "wh_names", Args: []string{"--", "sh", "-c", `echo x > wh/.wh.a; echo y > wh/.wh..wh..opq; echo z > .wh.keep.txt; ls -A wh; cat keep.txt`}},
		// A command that fills the upper dir's budget: the VM's work
		// drive holds --upper-size, as ns's upper tmpfs on the host (a
		// directory's blocks count on ext4, not on tmpfs: sizes differ).
		// Many entries in one directory: the upper dir's walk takes many
		// reads of it and allocates, so the collector runs mid-walk.
		rungcompare.Case{Name: "many_files", Args: []string{"--", "sh", "-c", `mkdir m; i=0; while [ $i -lt 500 ]; do echo $i > m/f$i; i=$((i+1)); done; echo done`}},
		rungcompare.Case{Name: "upper_full", Args: []string{"--upper-size", "8388608", "--", "sh", "-c", `cat /dev/zero > big; echo $?; ls big`}, SizesDiffer: true})
	rungcompare.ImageSameDeltaAsNS(t, vm.Name, rungcompare.AwkwardImage(t), cases)
}
