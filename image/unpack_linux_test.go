package image

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/rung/linuxns"
)

// pullLayers stacks a layer per entry list, writes the image to a fresh OCI layout and pulls it into c.
func pullLayers(t *testing.T, c *Cache, ents ...[]ent) (*PullResult, error) {
	t.Helper()
	img := mkImage(t)
	for _, e := range ents {
		img = mkImageOn(t, img, tarLayer(t, e...))
	}
	lay := layoutOf(t, img)
	return c.Pull(context.Background(), "oci:"+lay, PullOptions{})
}

// awkwardLayers are two layers with every awkward case a layer can hold:
// whiteouts, an opaque dir, a layer's own (forged) overlay xattrs, setuid
// and setgid files, absolute and relative symlinks, a hard link, device
// nodes, a FIFO, xattrs, read-only dirs and a leading slash. TestAwkwardLayers
// checks how they unpack, TestErofsPack that their erofs image is the merged
// view.
func awkwardLayers() (lower, upper []ent) {
	lower = []ent{
		{name: "a/", typ: '5'}, {name: "a/keep", body: "k"}, {name: "a/gone", body: "g"},
		{name: "b/", typ: '5'}, {name: "b/old", body: "o"},
		{name: "c", body: "c-content"},
		{name: "h", typ: '1', link: "c"},
		{name: "usr/bin/su", body: "#!/bin/sh\n", mode: 0o4755},
		{name: "usr/bin/wall", body: "#!/bin/sh\n", mode: 0o2755, uid: 7},
		{name: "abs", typ: '2', link: "/etc/passwd"},
		{name: "rel", typ: '2', link: "../c"},
		{name: "dev/null", typ: '3', major: 1, minor: 3},
		{name: "dev/sda", typ: '4', major: 8, minor: 0},
		{name: "pipe", typ: '6'},
		{name: "x", body: "xattrs", pax: map[string]string{"SCHILY.xattr.user.note": "hi", "SCHILY.xattr.trusted.overlay.opaque": "y",
			"SCHILY.xattr.user.overlay.opaque": "y"}},
		{name: "forged/", typ: '5'}, {name: "forged/old", body: "o"},
		// A read-only directory with entries after it: a caller that is not
		// root must still fill it, and it ends read-only.
		{name: "ro/", typ: '5', mode: 0o555}, {name: "ro/sub/", typ: '5', mode: 0o500}, {name: "ro/sub/f", body: "f"},
		{name: "/leading/slash", body: "relative after all"},
	}
	upper = []ent{
		{name: ".wh.c", body: ""},
		{name: "a/.wh.gone", body: ""},
		{name: "b/.wh..wh..opq", body: ""},
		{name: "b/new", body: "n"},
		// A layer's own overlay xattr on a directory: in the userxattr
		// form it would make the directory opaque, hiding forged/old.
		{name: "forged/", typ: '5', pax: map[string]string{"SCHILY.xattr.user.overlay.opaque": "y", "SCHILY.xattr.trusted.overlay.opaque": "y"}},
		{name: "forged/new", body: "n"},
	}
	return lower, upper
}

// TestAwkwardLayers unpacks two layers with every awkward case, checks the
// overlay form on disk, then mounts the stack with overlayfs and checks what a
// sandbox would see.
func TestAwkwardLayers(t *testing.T) {
	needRoot(t)
	c, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Before TempDir's own removal, which cannot enter the read-only ro/
	// as a caller that is not root.
	t.Cleanup(func() { removeAll(c.Dir()) })
	lower, upper := awkwardLayers()
	res, err := pullLayers(t, c, lower, upper)
	if err != nil {
		t.Fatal(err)
	}
	if res.Skipped != 2 {
		t.Errorf("skipped %d entries, want the 2 device nodes", res.Skipped)
	}
	dirs := c.LayerDirs(res.Image)
	lo, up := dirs[0], dirs[1]
	st := func(p string) *syscall.Stat_t {
		t.Helper()
		var s syscall.Stat_t
		if err := syscall.Lstat(p, &s); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		return &s
	}
	if s := st(filepath.Join(up, "c")); s.Mode&syscall.S_IFMT != syscall.S_IFCHR || s.Rdev != 0 {
		t.Errorf("whiteout of c is mode %o rdev %d, want a 0/0 character device", s.Mode, s.Rdev)
	}
	if s := st(filepath.Join(up, "a/gone")); s.Mode&syscall.S_IFMT != syscall.S_IFCHR {
		t.Errorf("whiteout of a/gone is mode %o", s.Mode)
	}
	buf := make([]byte, 8)
	key := opaqueKey
	if c.Form() == FormUserXattr {
		key = userOpaqueKey
	}
	if n, err := unix.Lgetxattr(filepath.Join(up, "b"), key, buf); err != nil || string(buf[:n]) != "y" {
		t.Errorf("b is not opaque (%s): %q, %v", key, buf[:n], err)
	}
	for _, k := range []string{opaqueKey, userOpaqueKey} {
		for _, p := range []string{filepath.Join(lo, "x"), filepath.Join(up, "forged")} {
			if _, err := unix.Lgetxattr(p, k, buf); err == nil {
				t.Errorf("a layer's own %s xattr was kept on %s", k, p)
			}
		}
	}
	// Owners: the tar's as root; rootless, every file the caller's.
	if s := st(filepath.Join(lo, "usr/bin/su")); c.Form() == FormUserXattr && (int(s.Uid) != os.Getuid() || int(s.Gid) != os.Getgid()) {
		t.Errorf("su owned by %d:%d in a rootless cache, want the caller's", s.Uid, s.Gid)
	}
	if n, err := unix.Lgetxattr(filepath.Join(lo, "x"), "user.note", buf); err != nil || string(buf[:n]) != "hi" {
		t.Errorf("user.note: %q, %v", buf[:n], err)
	}
	if a, b := st(filepath.Join(lo, "c")), st(filepath.Join(lo, "h")); a.Ino != b.Ino {
		t.Error("h is not a hardlink of c")
	}
	if s := st(filepath.Join(lo, "usr/bin/su")); s.Mode&0o7777 != 0o4755 {
		t.Errorf("su mode %o, want 4755", s.Mode&0o7777)
	}
	if s := st(filepath.Join(lo, "usr/bin/wall")); s.Mode&0o7777 != 0o2755 {
		t.Errorf("wall mode %o, want 2755", s.Mode&0o7777)
	}
	if s := st(filepath.Join(lo, "ro")); s.Mode&0o7777 != 0o555 {
		t.Errorf("ro mode %o, want 555", s.Mode&0o7777)
	}
	if s := st(filepath.Join(lo, "ro/sub")); s.Mode&0o7777 != 0o500 {
		t.Errorf("ro/sub mode %o, want 500", s.Mode&0o7777)
	}
	st(filepath.Join(lo, "ro/sub/f"))
	if l, err := os.Readlink(filepath.Join(lo, "abs")); err != nil || l != "/etc/passwd" {
		t.Errorf("abs -> %q, %v", l, err)
	}
	if _, err := os.Lstat(filepath.Join(lo, "dev/null")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("device node dev/null created: %v", err)
	}
	if s := st(filepath.Join(lo, "pipe")); s.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		t.Errorf("pipe is mode %o", s.Mode)
	}
	if _, err := os.Stat(filepath.Join(lo, "leading/slash")); err != nil {
		t.Errorf("/leading/slash not unpacked inside the layer: %v", err)
	}
	if st, err := os.Stat(c.Dir()); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("cache dir mode %v (%v), want 0700: it holds setuid files", st.Mode(), err)
	}

	// What overlayfs makes of the stack: the sandbox's view, as the ns rung
	// mounts it for this caller (rootless: in a user namespace, userxattr).
	view, err := linuxns.ImageView(linuxns.Name, dirs)
	if err != nil {
		t.Fatalf("mounting the layers: %v", err)
	}
	defer view.Close()
	mnt := fmt.Sprintf("/proc/self/fd/%d", view.Fd())
	if _, err := os.Lstat(filepath.Join(mnt, "c")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("c still visible: %v", err)
	}
	if got := entries(t, filepath.Join(mnt, "a")); !slices.Equal(got, []string{"keep"}) {
		t.Errorf("a holds %v, want [keep]", got)
	}
	if got := entries(t, filepath.Join(mnt, "b")); !slices.Equal(got, []string{"new"}) {
		t.Errorf("opaque b holds %v, want [new]", got)
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "h")); err != nil || string(b) != "c-content" {
		t.Errorf("h: %q, %v", b, err)
	}
	if got := entries(t, filepath.Join(mnt, "forged")); !slices.Equal(got, []string{"new", "old"}) {
		t.Errorf("forged holds %v, want [new old]: a layer's own overlay xattr made it opaque", got)
	}
}

// TestHostileLayers: no tar entry writes, links or resolves outside the
// layer's directory, and a refused layer leaves nothing behind.
func TestHostileLayers(t *testing.T) {
	needRoot(t)
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("host file"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ents []ent
	}{
		{"dotdot", []ent{{name: "../../../../../../.." + outside + "/x", body: "pwn"}}},
		{"dotdot inside", []ent{{name: "a/../../x", body: "pwn"}}},
		{"symlink then write through it", []ent{{name: "evil", typ: '2', link: outside}, {name: "evil/x", body: "pwn"}}},
		{"relative symlink then write through it", []ent{{name: "d/", typ: '5'}, {name: "d/evil", typ: '2', link: "../../../../../../../.." + outside}, {name: "d/evil/x", body: "pwn"}}},
		{"symlink then whiteout through it", []ent{{name: "evil", typ: '2', link: outside}, {name: "evil/.wh.secret", body: ""}}},
		{"symlink then opaque through it", []ent{{name: "evil", typ: '2', link: outside}, {name: "evil/.wh..wh..opq", body: ""}}},
		{"hardlink to outside", []ent{{name: "h", typ: '1', link: "../../../../../../.." + secret}}},
		{"hardlink absolute", []ent{{name: "h", typ: '1', link: secret}}},
		{"hardlink through a symlink", []ent{{name: "evil", typ: '2', link: outside}, {name: "h", typ: '1', link: "evil/secret"}}},
		{"whiteout of dotdot", []ent{{name: "a/.wh...", body: ""}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Open(t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			_, err = pullLayers(t, c, tc.ents)
			if !errors.Is(err, ErrUnsafeLayer) {
				t.Errorf("pull = %v, want ErrUnsafeLayer", err)
			}
			if got := entries(t, outside); !slices.Equal(got, []string{"secret"}) {
				t.Errorf("outside holds %v", got)
			}
			var s syscall.Stat_t
			if err := syscall.Stat(secret, &s); err != nil || s.Nlink != 1 {
				t.Errorf("secret has %d links (%v)", s.Nlink, err)
			}
			if b, _ := os.ReadFile(secret); string(b) != "host file" {
				t.Errorf("secret now %q", b)
			}
			if l := entries(t, filepath.Join(c.Dir(), "layers")); len(l) != 0 {
				t.Errorf("layers/ holds %v after a refused layer", l)
			}
			if l := entries(t, filepath.Join(c.Dir(), "tmp")); len(l) != 0 {
				t.Errorf("tmp/ holds %v after a refused layer", l)
			}
		})
	}
}

func TestCleanName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"a/b", "a/b"}, {"./a/b/", "a/b"}, {"/etc/x", "etc/x"}, {"//a//b", "a/b"}, {".", "."}, {"/", "."},
		{"a/../b", "b"}, {"..", ""}, {"../x", ""}, {"a/../../x", ""}, {"/../x", ""}, {"a\x00b", ""},
	} {
		got, err := cleanName(tc.in)
		if (err != nil) != (tc.want == "") || (err == nil && got != tc.want) {
			t.Errorf("cleanName(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
		if err != nil && !errors.Is(err, ErrUnsafeLayer) {
			t.Errorf("cleanName(%q): %v is not ErrUnsafeLayer", tc.in, err)
		}
	}
}
