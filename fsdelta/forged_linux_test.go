package fsdelta

import (
	"errors"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/fswalk"
	"github.com/dryexec/dryexec/wire"
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
		if e.Kind == wire.EntryWhiteout || e.Opaque {
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
		if e.Kind == wire.EntryWhiteout || e.Opaque {
			t.Errorf("forged marker taken for the overlay's: %+v", e.FSEntry)
		}
	}

	got, blobs := diffUpperOpts(t, o.upper, lower, fswalk.WalkOptions{UserXattr: mode.userXattr}, diffMax)
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
		if e.Kind == wire.EntryWhiteout || e.Opaque {
			t.Errorf("forged marker taken for the overlay's: %+v", e.FSEntry)
		}
	}
	got := diffUpper(t, o.upper, lower, mode.userXattr, diffMax)
	checkChanges(t, lower, got, []wc{wMkdir("nd", "0755"), wCreate("new", "", "0644")})
}

// TestForgedOriginMakesNoHostLink: the Differ says a new path is a hard link
// to a host file only when the upper holds the two as one inode, which only a
// link(2) through the overlay makes; it never reads overlayfs's origin xattr
// (which names the lower file a copy-up came from). A command that writes a
// copy of a host file and marks it with the origin of that file (as far as it
// can: user.overlay.* through the overlay as root; here also the exact
// trusted.*/user.* origin bytes of a real copy-up, planted in the upper
// behind the overlay's back, which no command can do) gets a plain create:
// commit then writes a copy and never links a host file natively not linked.
// Linking a host file and then changing it through the link, or deleting the
// host name, is no host link to the file as it was either.
func TestForgedOriginMakesNoHostLink(t *testing.T) {
	rootOrSkip(t)
	for _, mode := range overlayModes[:2] {
		t.Run(mode.name, func(t *testing.T) {
			lower := tempDir(t) + "/lower"
			must(t, os.Mkdir(lower, 0o755))
			buildTree(t, lower, with(file("secret", "host content\n", 0o644), file("h2", "two\n", 0o644),
				file("h3", "three\n", 0o644), file("probe", "probe\n", 0o644)))
			o := mountOverlay(t, lower, mode.opts)
			f := fsops{t, o.merged}
			prefix := "trusted.overlay."
			if mode.userXattr {
				prefix = "user.overlay."
			}
			// A real copy-up, whose origin xattr the forgery copies.
			f.chmod("probe", 0o600)
			// The copy, marked as best the command can.
			f.write("d/copy", "host content\n")
			for _, name := range []string{"user.overlay.origin", "user.overlay.nlink", "trusted.overlay.origin"} {
				unix.Lsetxattr(f.p("d/copy"), name, []byte("forged"), 0) // refused or stored escaped, or an ordinary xattr
			}
			// A link, then the host file changed through it.
			f.link("h2", "d/h2link")
			must(t, os.WriteFile(f.p("d/h2link"), []byte("two, changed\n"), 0o644))
			// A link, then the host name deleted: the new name alone.
			f.link("h3", "d/h3link")
			f.remove("h3")
			o.unmount()
			// The strongest forgery: the real origin bytes on the copy.
			buf := make([]byte, 4096)
			n, err := unix.Lgetxattr(o.upper+"/probe", prefix+"origin", buf)
			if err != nil {
				t.Fatalf("the copy-up of probe has no %sorigin: %v", prefix, err)
			}
			must(t, unix.Lsetxattr(o.upper+"/d/copy", prefix+"origin", buf[:n], 0))

			got, touched, _ := diffUpperAll(t, o.upper, lower, fswalk.WalkOptions{UserXattr: mode.userXattr}, diffMax)
			checkChanges(t, lower, got, []wc{
				wCreate("d/copy", "host content\n", "0644", "+host content"),
				wCreate("d/h2link", "two, changed\n", "0644", "+two, changed"),
				wCreate("d/h3link", "three\n", "0644", "+three"),
				wModify("h2", "two\n", "two, changed\n", "0644", "0644", "-two", "+two, changed"),
				wDelete("h3", "three\n", "0644"),
				wChmod("probe", "probe\n", "0644", "0600"),
			})
			// One group: h2 and its new name, with the new content (commit
			// writes it; no link to the old host file). Nothing else.
			checkGroups(t, lower, got, [][]string{{"d/h2link", "h2"}})
			for _, c := range append(got, touched...) {
				if strings.HasSuffix(c.Path, "/secret") {
					t.Errorf("the host file the copy claims to be is in the delta: %+v", c)
				}
			}
		})
	}
}
