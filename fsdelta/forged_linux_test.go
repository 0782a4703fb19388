package fsdelta

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
)

// As root the overlay keeps its markers in trusted.overlay.*, and nothing guards
// user.overlay.*: the sandboxed command may set those on any file or dir it can
// write. Forged whiteout and opaque markers must read as the ordinary files and
// dirs they are (which is also what the merged view shows), never as deletions
// of host files.
func TestForgedUserXattrsOnTrustedOverlay(t *testing.T) {
	rootOrSkip(t)
	lower := tempDir(t)
	must(t, os.Chmod(lower, 0o755)) // as the upper's root, for the view comparison
	buildTree(t, lower, with(
		file("victim", "", 0o644),
		file("victim2", "precious\n", 0o644),
		dir("hd", 0o755),
		file("hd/a", "a\n", 0o644),
		dir("hd/sub", 0o755),
		file("hd/sub/b", "b\n", 0o644),
	))
	lowerBefore := snapshot(t, lower)
	mode := overlayModes[0]
	if mode.userXattr {
		t.Fatal("overlayModes[0] is not the trusted.* mode")
	}
	o := mountOverlay(t, lower, mode.opts)
	f := fsops{t, o.merged}
	forge := func(rel, name, value string) {
		t.Helper()
		setxattr(t, f.p(rel), name, value) // skips where the upper fs has no user.* xattrs
	}
	// What the command does, through the merged view.
	f.write("new-empty", "")
	forge("new-empty", "user.overlay.whiteout", "")
	f.mkdir("newdir")
	forge("newdir", "user.overlay.opaque", "y")
	f.write("newdir/x", "")
	forge("newdir/x", "user.overlay.whiteout", "")
	f.touch("victim") // copied up, still empty
	forge("victim", "user.overlay.whiteout", "")
	f.write("victim2", "") // truncated to the size of an xattr whiteout
	forge("victim2", "user.overlay.whiteout", "")
	f.write("hd/new", "n\n")
	forge("hd", "user.overlay.opaque", "y")
	// The overlay's own namespace is out of reach through the overlay (and the
	// command lacks the capability for trusted.* anyway): refused, or since
	// Linux 6.7 escaped, stored as trusted.overlay.overlay.*.
	mustNotReachUpper(t, f, o.upper, "new-empty", "trusted.overlay.whiteout")
	mustNotReachUpper(t, f, o.upper, "hd", "trusted.overlay.opaque")
	view := contentTree(t, o.merged)
	o.unmount()

	// The forgeries are in the upper: a walk of the wrong namespace would see
	// whiteouts and opaque dirs...
	forged, err := walkAll(t, o.upper, 0, true)
	must(t, err)
	var nForged int
	for _, e := range forged {
		if e.Kind == EntryWhiteout || e.Opaque {
			nForged++
		}
	}
	if nForged != 6 {
		t.Fatalf("the upper holds %d forged markers, want 6: %+v", nForged, forged)
	}
	// ... the walk of the overlay's own namespace sees none.
	entries, err := walkAll(t, o.upper, 0, mode.userXattr)
	must(t, err)
	for _, e := range entries {
		if e.Kind == EntryWhiteout || e.Opaque {
			t.Errorf("forged marker taken for the overlay's: %+v", e.Entry)
		}
	}

	got, blobs := diffUpperOpts(t, o.upper, lower, WalkOptions{UserXattr: mode.userXattr}, diffMax)
	checkChanges(t, lower, got, []wc{
		wCreate("hd/new", "n\n", "0644", "+n"),
		wCreate("new-empty", "", "0644"),
		wMkdir("newdir", "0755"),
		wCreate("newdir/x", "", "0644"),
		wModify("victim2", "precious\n", "", "0644", "0644", "-precious"),
	})
	for _, c := range got {
		if c.Op == dryexec.OpDelete || c.Op == dryexec.OpRmdir {
			t.Errorf("forged xattr reported as a deletion: %+v", c)
		}
	}
	checkSameSnapshot(t, "lower", lowerBefore, snapshot(t, lower))
	// And the delta is what the merged view showed.
	cp := tempDir(t) + "/applied"
	copyTree(t, lower, cp)
	applyChanges(t, lower, cp, blobs, got)
	checkSameSnapshot(t, "applied delta vs merged view", view, contentTree(t, cp))
}

// mustNotReachUpper sets xattr name on rel through the overlay f, and fails the
// test unless the upper file is left without it: the overlay refused it, or
// stored it escaped (Linux 6.7+: X.overlay.Y as X.overlay.overlay.Y).
func mustNotReachUpper(t *testing.T, f fsops, upper, rel, name string) {
	t.Helper()
	err := unix.Lsetxattr(f.p(rel), name, []byte("y"), 0)
	if err != nil && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EOPNOTSUPP) {
		t.Fatalf("setting %s on %s: %v", name, rel, err)
	}
	var buf [8]byte
	if _, err := unix.Lgetxattr(upper+"/"+rel, name, buf[:]); err == nil {
		t.Errorf("%s set through the overlay reached the upper's %s unescaped", name, rel)
	}
}

// With userxattr (rootless) the overlay's markers are user.overlay.*, and the
// overlay does not let anyone set them through it: refused, or escaped (Linux
// 6.7+); trusted.* needs a capability the command never has. So the walk may
// read user.* there.
func TestUserxattrOverlayGuardsItsXattrs(t *testing.T) {
	rootOrSkip(t)
	lower := tempDir(t)
	buildTree(t, lower, baseLower)
	mode := overlayModes[1]
	if !mode.userXattr {
		t.Fatal("overlayModes[1] is not the userxattr mode")
	}
	o := mountOverlay(t, lower, mode.opts)
	f := fsops{t, o.merged}
	f.write("new", "")
	f.mkdir("nd")
	mustNotReachUpper(t, f, o.upper, "new", "user.overlay.whiteout")
	mustNotReachUpper(t, f, o.upper, "nd", "user.overlay.opaque")
	mustNotReachUpper(t, f, o.upper, "a.txt", "user.overlay.whiteout")
	mustNotReachUpper(t, f, o.upper, "d", "user.overlay.opaque")
	o.unmount()
	entries, err := walkAll(t, o.upper, 0, mode.userXattr)
	must(t, err)
	for _, e := range entries {
		if e.Kind == EntryWhiteout || e.Opaque {
			t.Errorf("forged marker taken for the overlay's: %+v", e.Entry)
		}
	}
	got := diffUpper(t, o.upper, lower, mode.userXattr, diffMax)
	checkChanges(t, lower, got, []wc{wMkdir("nd", "0755"), wCreate("new", "", "0644")})
}
