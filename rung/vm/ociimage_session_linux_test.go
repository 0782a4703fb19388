package vm_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

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
// its erofs drive under the VM's own overlay (no 9p); it parks and resumes
// with the same drive attached again (its memory, the overlay's upper dir
// in the VM's RAM, as they were), forks with memory, and a resume whose
// image cache built the erofs again since (a prune) is refused, typed:
// the saved memory holds the old drive's metadata.
func TestImageSessionOnDrive(t *testing.T) {
	requireVM(t)
	root := rungcompare.PullImage(t, rungcompare.AwkwardImage(t))
	ctx := t.Context()
	s, err := session.Open(ctx, session.Options{Rung: vm.Name, Image: root})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := s.Shell(ctx, `cat /w/keep.txt /proc/self/mounts; echo w > w.txt; echo up > /w/up.txt`, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The root is the VM's overlay over the erofs drive; nothing is 9p.
	if !strings.Contains(r.Stdout, "lowerdir=/vmimage/lower") || strings.Contains(r.Stdout, " 9p ") || r.ExitCode != 0 {
		t.Errorf("exit %d, stdout %q (stderr %q): want the root over the image drive, no 9p", r.ExitCode, r.Stdout, r.Stderr)
	}
	p, err := s.Park(ctx, t.TempDir())
	if err != nil {
		t.Fatalf("parking a vm session on an image: %v", err)
	}
	s2, err := session.Resume(ctx, p)
	if err != nil {
		t.Fatalf("resuming a vm session on an image: %v", err)
	}
	defer s2.Close()
	r, err = s2.Shell(ctx, `cat w.txt /w/up.txt /w/keep.txt`, 0)
	if err != nil || r.ExitCode != 0 || r.Stdout != "w\nup\nkeep\n" {
		t.Errorf("after resume: %v, exit %d, stdout %q (stderr %q): want the workspace, the overlay's upper (in the VM's RAM) and the image as they were", err, r.ExitCode, r.Stdout, r.Stderr)
	}
	d, err := s2.Diff(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if string(d.Writes["w.txt"]) != "w\n" || len(d.Writes) != 1 {
		t.Errorf("diff after resume: %+v, want w.txt only", d)
	}
	// A fork with memory: each branch a restore of the VM's snapshot, on
	// the same drive, its overlay's upper dir its own from then on.
	bs, err := s2.Fork(ctx, 2)
	if err != nil {
		t.Fatalf("forking a vm session on an image: %v", err)
	}
	for _, b := range bs {
		defer b.Close()
	}
	for i, b := range bs {
		if _, err := b.Shell(ctx, "echo "+strconv.Itoa(i)+" > /w/up.txt", 0); err != nil {
			t.Fatal(err)
		}
	}
	for i, b := range append(bs, s2) {
		want := []string{"0\n", "1\n", "up\n"}[i]
		if r, err := b.Shell(ctx, "cat /w/up.txt; cat /w/keep.txt", 0); err != nil || r.Stdout != want+"keep\n" {
			t.Errorf("session %d after the fork: %v %+v, want %q then the image's keep.txt", i, err, r, want)
		}
	}
	// The cache prunes the image's erofs and builds it again: another file.
	p2, err := s2.Park(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	erofs := filepath.Join(filepath.Dir(filepath.Dir(root.Layers[0])), "erofs", strings.TrimPrefix(root.Digest, "sha256:")+".erofs")
	if err := os.Remove(erofs); err != nil {
		t.Fatal(err)
	}
	if _, err := session.Resume(ctx, p2); !errors.Is(err, vm.ErrDriveChanged) {
		t.Errorf("resuming over an erofs built again: %v, want ErrDriveChanged", err)
	}
}
