package fsdelta

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/dryexec/dryexec/fswalk"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/wire"
	"golang.org/x/sys/unix"
)

type walked struct {
	wire.FSEntry
	content string
}

func walkAll(t testing.TB, root string, mount int, userXattr bool) ([]walked, error) {
	t.Helper()
	var out []walked
	err := fswalk.WalkUpper(root, mount, userXattr, func(e *wire.FSEntry, content *os.File) error {
		w := walked{FSEntry: *e}
		if (content != nil) != (e.Kind == wire.EntryFile) {
			t.Errorf("%s: kind %s with content %v", e.Path, e.Kind, content != nil)
		}
		if content != nil {
			b, err := io.ReadAll(content)
			if err != nil {
				return err
			}
			w.content = string(b)
		}
		out = append(out, w)
		return nil
	})
	return out, err
}

func setxattr(t testing.TB, p, name, value string) {
	t.Helper()
	if err := unix.Lsetxattr(p, name, []byte(value), 0); err != nil {
		if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EPERM) {
			testreq.Needf(t, testreq.Kernel, "xattr "+name, err)
		}
		t.Fatalf("setxattr %s on %s: %v", name, p, err)
	}
}

// An upper dir made by hand holds every kind of entry overlay can leave in it,
// with markers of both xattr namespaces. Each walk reads only the namespace its
// overlay uses (trusted.* as root, user.* with userxattr): the other one's
// markers are ordinary xattrs of ordinary files and dirs.
func TestWalkUpperKinds(t *testing.T) {
	rootOrSkip(t) // trusted.* xattrs, mknod, chown
	up := t.TempDir()
	buildTree(t, up, []node{
		dir("a", 0o755),
		file("a/f", "hello\n", 0o644),
		dir("b-opaque-trusted", 0o700),
		file("b-opaque-trusted/in", "in", 0o600),
		dir("c-opaque-user", 0o755),
		dir("c-x-not-opaque", 0o755),
		file("empty", "", 0o644),
		link("ln", "../target"),
		ownedBy(1234, 5678, file("owned", "o", 0o640)),
		ownedBy(4321, 8765, link("owned-ln", "owned")),
		file("suid", "#!\n", 0o4755),
		file("xw-trusted", "", 0o644),
		file("xw-user", "", 0o644),
		file("xw-user-nonempty", "data", 0o644),
	})
	must(t, unix.Mknod(up+"/a/wh", unix.S_IFCHR, 0))
	must(t, unix.Mknod(up+"/null", unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(t, unix.Chmod(up+"/null", 0o666))
	must(t, unix.Mkfifo(up+"/fifo", 0o640))
	setxattr(t, up+"/b-opaque-trusted", "trusted.overlay.opaque", "y")
	setxattr(t, up+"/c-opaque-user", "user.overlay.opaque", "y")
	setxattr(t, up+"/c-x-not-opaque", "trusted.overlay.opaque", "x")
	setxattr(t, up+"/xw-trusted", "trusted.overlay.whiteout", "")
	setxattr(t, up+"/xw-user", "user.overlay.whiteout", "")
	setxattr(t, up+"/xw-user-nonempty", "user.overlay.whiteout", "")

	for _, userXattr := range []bool{false, true} {
		t.Run(fmt.Sprintf("userxattr=%v", userXattr), func(t *testing.T) {
			// kind is k when the marker is in the walk's namespace, else other.
			trusted, user := !userXattr, userXattr
			kind := func(mine bool, k, other wire.EntryKind) wire.EntryKind {
				if mine {
					return k
				}
				return other
			}
			want := []walked{
				{FSEntry: wire.FSEntry{Path: "a", Kind: wire.EntryDir, Mode: 0o755}},
				{FSEntry: wire.FSEntry{Path: "a/f", Kind: wire.EntryFile, Mode: 0o644, Size: 6}, content: "hello\n"},
				{FSEntry: wire.FSEntry{Path: "a/wh", Kind: wire.EntryWhiteout}},
				{FSEntry: wire.FSEntry{Path: "b-opaque-trusted", Kind: wire.EntryDir, Mode: 0o700, Opaque: trusted}},
				{FSEntry: wire.FSEntry{Path: "b-opaque-trusted/in", Kind: wire.EntryFile, Mode: 0o600, Size: 2}, content: "in"},
				{FSEntry: wire.FSEntry{Path: "c-opaque-user", Kind: wire.EntryDir, Mode: 0o755, Opaque: user}},
				{FSEntry: wire.FSEntry{Path: "c-x-not-opaque", Kind: wire.EntryDir, Mode: 0o755}},
				{FSEntry: wire.FSEntry{Path: "empty", Kind: wire.EntryFile, Mode: 0o644}},
				{FSEntry: wire.FSEntry{Path: "fifo", Kind: wire.EntryFIFO, Mode: 0o640}},
				{FSEntry: wire.FSEntry{Path: "ln", Kind: wire.EntrySymlink, Mode: 0o777, Link: "../target"}},
				{FSEntry: wire.FSEntry{Path: "null", Kind: wire.EntryOther, Mode: 0o666}},
				{FSEntry: wire.FSEntry{Path: "owned", Kind: wire.EntryFile, Mode: 0o640, Size: 1, UID: 1234, GID: 5678}, content: "o"},
				{FSEntry: wire.FSEntry{Path: "owned-ln", Kind: wire.EntrySymlink, Mode: 0o777, Link: "owned", UID: 4321, GID: 8765}},
				{FSEntry: wire.FSEntry{Path: "suid", Kind: wire.EntryFile, Mode: 0o4755, Size: 3}, content: "#!\n"},
				{FSEntry: wire.FSEntry{Path: "xw-trusted", Kind: kind(trusted, wire.EntryWhiteout, wire.EntryFile), Mode: 0o644}},
				{FSEntry: wire.FSEntry{Path: "xw-user", Kind: kind(user, wire.EntryWhiteout, wire.EntryFile), Mode: 0o644}},
				{FSEntry: wire.FSEntry{Path: "xw-user-nonempty", Kind: wire.EntryFile, Mode: 0o644, Size: 4}, content: "data"},
			}
			for i := range want {
				want[i].Mount = 3
			}
			got, err := walkAll(t, up, 3, userXattr)
			must(t, err)
			if len(got) != len(want) {
				t.Fatalf("got %d entries, want %d:\n%+v", len(got), len(want), got)
			}
			for i := range want {
				// The mtime is the upper's, none for a whiteout.
				var st unix.Stat_t
				must(t, unix.Lstat(up+"/"+got[i].Path, &st))
				if mt := st.Mtim.Nano(); got[i].Kind == wire.EntryWhiteout && got[i].MtimeNS != 0 || got[i].Kind != wire.EntryWhiteout && got[i].MtimeNS != mt {
					t.Errorf("entry %d (%s): mtime %d, the upper's is %d", i, got[i].Path, got[i].MtimeNS, mt)
				}
				got[i].MtimeNS = 0
				if got[i] != want[i] {
					t.Errorf("entry %d:\n got %+v\nwant %+v", i, got[i], want[i])
				}
			}
		})
	}
}

func TestWalkUpperEmptyAndErrors(t *testing.T) {
	up := t.TempDir()
	got, err := walkAll(t, up, 0, false)
	if err != nil || len(got) != 0 {
		t.Fatalf("empty upper: %v %v", got, err)
	}
	if _, err := walkAll(t, up+"/missing", 0, false); err == nil {
		t.Fatal("walking a missing dir succeeded")
	}
	buildTree(t, up, []node{dir("a", 0o755), file("a/b", "b", 0o644), file("c", "c", 0o644)})
	stop := errors.New("stop")
	var n int
	err = fswalk.WalkUpper(up, 0, false, func(e *wire.FSEntry, _ *os.File) error {
		n++
		if e.Path == "a/b" {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 2 {
		t.Fatalf("emit's error: got %v after %d entries", err, n)
	}
}

// The xattr forms of whiteout and opaque dir, fed to the Differ, delete the host's
// files as the char-device form does, when they are in the namespace the overlay
// uses; in the other namespace they are nobody's markers and delete nothing.
func TestXattrWhiteoutAndOpaqueDiff(t *testing.T) {
	rootOrSkip(t)
	for _, ns := range []string{"user", "trusted"} {
		for _, userXattr := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s.overlay.* userxattr=%v", ns, userXattr), func(t *testing.T) {
				base := t.TempDir()
				lower, up := base+"/lower", base+"/upper"
				must(t, os.Mkdir(lower, 0o755))
				must(t, os.Mkdir(up, 0o755))
				buildTree(t, lower, with(dir("o", 0o755), file("o/x", "x\n", 0o644), file("o/keep", "k\n", 0o644)))
				buildTree(t, up, []node{
					file("a.txt", "", 0o644),
					dir("o", 0o755),
					file("o/keep", "k\n", 0o644),
				})
				setxattr(t, up+"/a.txt", ns+".overlay.whiteout", "")
				setxattr(t, up+"/o", ns+".overlay.opaque", "y")
				before := snapshot(t, lower)
				got := diffUpper(t, up, lower, userXattr, diffMax)
				if (ns == "user") == userXattr {
					checkChanges(t, lower, got, []wc{
						wDelete("a.txt", "one\ntwo\n", "0644"),
						wDelete("o/x", "x\n", "0644"),
					})
				} else {
					checkChanges(t, lower, got, []wc{
						wModify("a.txt", "one\ntwo\n", "", "0644", "0644", "-one"),
					})
				}
				checkSameSnapshot(t, "lower", before, snapshot(t, lower))
			})
		}
	}
}

// Overlay features that leave an upper which does not hold what the merged view
// shows are refused by the walk rather than misreported.
func TestWalkRefusesRedirectAndMetacopy(t *testing.T) {
	rootOrSkip(t)
	t.Run("redirect xattr by hand", func(t *testing.T) {
		for _, x := range []string{"trusted.overlay.redirect", "user.overlay.redirect"} {
			up := t.TempDir()
			buildTree(t, up, []node{dir("moved", 0o755)})
			setxattr(t, up+"/moved", x, "/orig")
			userXattr := strings.HasPrefix(x, "user.")
			if _, err := walkAll(t, up, 0, userXattr); err == nil || !strings.Contains(err.Error(), "redirect") {
				t.Errorf("%s: walk error %v", x, err)
			}
			// The other namespace's walk sees an ordinary dir.
			if got, err := walkAll(t, up, 0, !userXattr); err != nil || len(got) != 1 || got[0].Kind != wire.EntryDir {
				t.Errorf("%s, userxattr=%v: %+v, %v", x, !userXattr, got, err)
			}
		}
	})
	t.Run("metacopy xattr by hand", func(t *testing.T) {
		for _, x := range []string{"trusted.overlay.metacopy", "user.overlay.metacopy"} {
			up := t.TempDir()
			buildTree(t, up, []node{file("f", "\x00\x00\x00", 0o600)})
			setxattr(t, up+"/f", x, "")
			userXattr := strings.HasPrefix(x, "user.")
			if _, err := walkAll(t, up, 0, userXattr); err == nil || !strings.Contains(err.Error(), "metacopy") {
				t.Errorf("%s: walk error %v", x, err)
			}
			if got, err := walkAll(t, up, 0, !userXattr); err != nil || len(got) != 1 || got[0].Kind != wire.EntryFile {
				t.Errorf("%s, userxattr=%v: %+v, %v", x, !userXattr, got, err)
			}
		}
	})
	try := func(t *testing.T, opts string, do func(m string) error, wantErr string) {
		lower := tempDir(t)
		buildTree(t, lower, baseLower)
		base := tempDir(t)
		o := &overlay{lower: lower, upper: base + "/u", work: base + "/w", merged: base + "/m"}
		for _, d := range []string{o.upper, o.work, o.merged} {
			must(t, os.Mkdir(d, 0o755))
		}
		err := unix.Mount("overlay", o.merged, "overlay", 0,
			fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,%s", lower, o.upper, o.work, opts))
		if err != nil {
			testreq.Needf(t, testreq.Kernel, "overlayfs "+opts, err)
		}
		o.mounted = true
		t.Cleanup(o.unmount)
		if err := do(o.merged); err != nil {
			testreq.Needf(t, testreq.Kernel, "overlayfs "+opts, err)
		}
		o.unmount()
		_, err = walkAll(t, o.upper, 0, false)
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("walk of a %s upper: error %v, want one about %s", opts, err, wantErr)
		}
	}
	t.Run("redirect_dir=on rename", func(t *testing.T) {
		try(t, "redirect_dir=on", func(m string) error { return os.Rename(m+"/d", m+"/moved") }, "redirect")
	})
	t.Run("metacopy=on chmod", func(t *testing.T) {
		try(t, "redirect_dir=on,metacopy=on", func(m string) error { return os.Chmod(m+"/a.txt", 0o600) }, "metacopy")
	})
}

// A redirect is honoured only where the overlay was mounted with
// redirect_dir=on, only in the overlay's own xattr namespace, and only when it
// names a path within the lower; anything else is refused or, in the other
// namespace, an ordinary xattr of an ordinary dir.
func TestWalkRedirects(t *testing.T) {
	rootOrSkip(t)
	cases := []struct {
		name    string
		xattr   string
		parent  string // made opaque when "opaque"
		value   string
		want    string // wire.FSEntry.Redirect of "p/moved"
		wantErr string
	}{
		{name: "absolute", xattr: "trusted.overlay.redirect", value: "/orig/x", want: "orig/x"},
		{name: "relative", xattr: "trusted.overlay.redirect", value: "orig", want: "p/orig"},
		{name: "to its own path", xattr: "trusted.overlay.redirect", value: "moved"},
		{name: "user namespace is not the overlay's", xattr: "user.overlay.redirect", value: "/etc"},
		{name: "dot-dot", xattr: "trusted.overlay.redirect", value: "/../etc", wantErr: "bad redirect"},
		{name: "relative dot-dot", xattr: "trusted.overlay.redirect", value: "..", wantErr: "bad redirect"},
		{name: "root", xattr: "trusted.overlay.redirect", value: "/", wantErr: "bad redirect"},
		{name: "not clean", xattr: "trusted.overlay.redirect", value: "/a//b", wantErr: "bad redirect"},
		{name: "relative with a slash", xattr: "trusted.overlay.redirect", value: "a/b", wantErr: "bad relative redirect"},
		{name: "relative below an opaque dir", xattr: "trusted.overlay.redirect", parent: "opaque", value: "x", wantErr: "bad relative redirect"},
		{name: "absolute below an opaque dir", xattr: "trusted.overlay.redirect", parent: "opaque", value: "/x", want: "x"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			up := t.TempDir()
			buildTree(t, up, []node{dir("p", 0o755), dir("p/moved", 0o755)})
			if c.parent == "opaque" {
				setxattr(t, up+"/p", "trusted.overlay.opaque", "y")
			}
			setxattr(t, up+"/p/moved", c.xattr, c.value)
			var got []wire.FSEntry
			err := fswalk.Walk(up, 0, fswalk.WalkOptions{Redirects: true}, func(e *wire.FSEntry, _ *os.File) error {
				got = append(got, *e)
				return nil
			})
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("walk: %v, want an error about %q", err, c.wantErr)
				}
				return
			}
			must(t, err)
			if len(got) != 2 || got[1].Path != "p/moved" || got[1].Redirect != c.want {
				t.Fatalf("entries %+v, want p/moved redirected to %q", got, c.want)
			}
		})
	}
	t.Run("never with userxattr", func(t *testing.T) {
		if err := fswalk.Walk(t.TempDir(), 0, fswalk.WalkOptions{UserXattr: true, Redirects: true}, nil); err == nil {
			t.Fatal("a walk honouring user.overlay.redirect was allowed")
		}
	})
}

// On an overlay mounted with redirect_dir=on the command can neither set the
// overlay's redirect (trusted.*) nor make the walk read its own user.* one: a
// forged redirect copies nothing of the host into the delta.
func TestForgedRedirectOnRedirectOverlay(t *testing.T) {
	rootOrSkip(t)
	mode := overlayModes[2]
	if !mode.redirects {
		t.Fatal("overlayModes[2] is not the redirect mode")
	}
	lower := tempDir(t)
	buildTree(t, lower, with(dir("secret", 0o700), file("secret/key", "K\n", 0o600)))
	o := mountOverlay(t, lower, mode.opts)
	f := fsops{t, o.merged}
	f.mkdir("nd")
	setxattr(t, f.p("nd"), "user.overlay.redirect", "/secret")
	mustNotReachUpper(t, f, o.upper, "nd", "trusted.overlay.redirect")
	o.unmount()
	got, _ := diffUpperOpts(t, o.upper, lower, fswalk.WalkOptions{Redirects: true}, diffMax)
	checkChanges(t, lower, got, []wc{wMkdir("nd", "0755")})
}
