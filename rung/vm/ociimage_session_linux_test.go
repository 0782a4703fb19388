package vm_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/rungcompare"
	"github.com/dryexec/dryexec/rung/vm"
	"github.com/dryexec/dryexec/session"
)

// TestImageSessionSameAsNS runs the same sessions on the awkward image on
// ns and on vm (the workspace pushed over the image, commands that change
// it and read and write the image around it) and requires the same results
// and diffs.
func TestImageSessionSameAsNS(t *testing.T) {
	requireVM(t)
	root := rungcompare.PullImage(t, rungcompare.AwkwardImage(t))
	rungcompare.SessionSameAsNS(t, vm.Name, rungcompare.ImageSessionCases(root))
}

// TestImageSessionOnDrive: a vm session on an image reads the image from
// its erofs drive under the VM's own overlay (no 9p), and parking it is
// refused, typed, the session going on.
func TestImageSessionOnDrive(t *testing.T) {
	requireVM(t)
	root := rungcompare.PullImage(t, rungcompare.AwkwardImage(t))
	s, err := session.Open(t.Context(), session.Options{Rung: vm.Name, Image: root})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := s.Shell(t.Context(), `cat /w/keep.txt /proc/self/mounts; echo w > w.txt`, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The root is the VM's overlay over the erofs drive; nothing is 9p.
	if !strings.Contains(r.Stdout, "lowerdir=/vmimage/lower") || strings.Contains(r.Stdout, " 9p ") || r.ExitCode != 0 {
		t.Errorf("exit %d, stdout %q (stderr %q): want the root over the image drive, no 9p", r.ExitCode, r.Stdout, r.Stderr)
	}
	_, err = s.Park(t.Context(), filepath.Join(t.TempDir(), "p"))
	var iu *dryexec.IsolationUnavailableError
	if !errors.As(err, &iu) || !strings.Contains(err.Error(), "image") {
		t.Errorf("parking a vm session on an image: %v, want an IsolationUnavailableError about the image", err)
	}
	d, err := s.Diff(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	if string(d.Writes["w.txt"]) != "w\n" || len(d.Writes) != 1 {
		t.Errorf("diff after the refused park: %+v, want w.txt only", d)
	}
}
