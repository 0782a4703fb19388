package image

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/linuxns"
)

func needMkfsErofs(t testing.TB) {
	t.Helper()
	_, err := exec.LookPath("mkfs.erofs")
	testreq.Needf(t, testreq.Tool, "mkfs.erofs", err)
}

// tree describes every entry under root as one line: type, mode, owner,
// size, mtime, target or content digest, and user xattrs: what a sandbox on
// the image could tell apart.
func tree(t testing.TB, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		what := ""
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			what, _ = os.Readlink(p)
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			what = fmt.Sprintf("%x", sha256.Sum256(b))
		case unix.S_IFCHR, unix.S_IFBLK:
			what = fmt.Sprint(st.Rdev)
		}
		buf := make([]byte, 256)
		var xs []string
		if n, err := unix.Llistxattr(p, buf); err == nil {
			for _, k := range splitNul(buf[:n]) {
				v := make([]byte, 256)
				m, _ := unix.Lgetxattr(p, k, v)
				xs = append(xs, k+"="+string(v[:max(m, 0)]))
			}
		}
		slices.Sort(xs)
		mt := st.Mtim.Nano()
		if d.IsDir() {
			mt = 0 // a directory's own mtime is the overlay's upper's or lower's: not the image's content
		}
		out = append(out, fmt.Sprintf("%s %o %d:%d %d %d %s %v", rel, st.Mode, st.Uid, st.Gid, st.Size*int64(btoi(!d.IsDir())), mt, what, xs))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func splitNul(b []byte) []string {
	var out []string
	for len(b) > 0 {
		i := slices.Index(b, 0)
		if i < 0 {
			i = len(b)
		}
		if i > 0 {
			out = append(out, string(b[:i]))
		}
		b = b[min(i+1, len(b)):]
	}
	return out
}

// TestErofsPack packs an image with every awkward layer case (awkwardLayers,
// TestAwkwardLayers's) from several goroutines at once: one builds it,
// the others wait and reuse it; mounted, it holds exactly the merged view the
// ns rung mounts. Prune keeps it while the image is recorded and removes it
// after.
func TestErofsPack(t *testing.T) {
	testreq.NeedRoot(t)
	needMkfsErofs(t)
	lower, upper := awkwardLayers()
	c, res, view := pulledView(t, lower, upper)

	const n = 4
	paths, builds := make([]string, n), make([]bool, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { paths[i], builds[i], errs[i] = c.Erofs(context.Background(), res.Image, view) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if got := slices.Index(builds, true); got < 0 || slices.Index(builds[got+1:], true) >= 0 {
		t.Errorf("builds %v: want exactly one", builds)
	}
	if slices.Compact(slices.Clone(paths))[0] != paths[0] || len(slices.Compact(slices.Clone(paths))) != 1 {
		t.Errorf("paths %v differ", paths)
	}
	if ents, _ := os.ReadDir(filepath.Join(c.Dir(), "tmp")); len(ents) != 0 {
		t.Errorf("tmp/ holds %d leftovers after the build", len(ents))
	}
	if st, err := os.Stat(paths[0]); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("erofs image mode %v (%v), want 0600", st.Mode(), err)
	}
	// Cached: a second use builds nothing.
	if p, built, err := c.Erofs(context.Background(), res.Image, view); err != nil || built || p != paths[0] {
		t.Errorf("second use: %s built=%v %v", p, built, err)
	}

	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "erofs", "-o", "ro,loop", paths[0], mnt).CombinedOutput(); err != nil {
		t.Fatalf("mounting the erofs image: %v: %s", err, out)
	}
	defer exec.Command("umount", mnt).Run()
	want := tree(t, fmt.Sprintf("/proc/self/fd/%d/", view.Fd()))
	got := tree(t, mnt)
	if !slices.Equal(got, want) {
		t.Errorf("the erofs image differs from the merged view:\n got %q\nwant %q", got, want)
	}
	for _, p := range []string{"c", "a/gone", "b/old"} {
		if _, err := os.Lstat(filepath.Join(mnt, p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s, whited out, is in the erofs image: %v", p, err)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(mnt, "usr/bin/su"), &st); err != nil || st.Mode&0o7777 != 0o4755 {
		t.Errorf("su: mode %o (%v), want 4755", st.Mode&0o7777, err)
	}
	exec.Command("umount", mnt).Run()

	// An erofs image whose image is no longer recorded goes with prune;
	// the recorded image's stays until rm.
	stray := filepath.Join(c.Dir(), "erofs", strings.Repeat("0", 64)+".erofs")
	if err := os.WriteFile(stray, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := c.Prune(context.Background())
	if err != nil || rep.Erofs != 1 {
		t.Errorf("prune: %+v, %v; want the stray erofs image removed", rep, err)
	}
	if _, err := os.Stat(paths[0]); err != nil {
		t.Errorf("prune removed the recorded image's erofs image: %v", err)
	}
	if _, err := c.Remove(context.Background(), res.Digest); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(paths[0]); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("erofs image still there after rm: %v", err)
	}
}

// TestErofsBadInput: a malformed digest, and layers outside any cache, are
// refused before anything is built.
func TestErofsBadInput(t *testing.T) {
	for _, d := range []string{"", "sha256:../../etc", "md5:abc"} {
		if _, _, err := erofsIn(context.Background(), t.TempDir(), d, nil, ""); !errors.Is(err, ErrBadDigest) {
			t.Errorf("digest %q: %v, want ErrBadDigest", d, err)
		}
	}
	if _, _, err := ErofsOf(context.Background(), "sha256:"+fmt.Sprint(make([]byte, 0)), []string{"/tmp/x"}, nil); err == nil {
		t.Error("layers outside a cache: no error")
	}
}

// TestErofsOneLayer: an image of one layer, whose view is a clone of the
// layer's directory (which the kernel will not clone again), packs from
// that directory: the erofs image holds the view, setuid bits and all.
func TestErofsOneLayer(t *testing.T) {
	testreq.NeedRoot(t)
	needMkfsErofs(t)
	c, res, view := pulledView(t, []ent{{name: "bin/", typ: '5'}, {name: "bin/su", body: "#!/bin/sh\n", mode: 0o4755}, {name: "abs", typ: '2', link: "/etc/passwd"}})
	p, built, err := ErofsOf(context.Background(), res.Image.Digest, c.LayerDirs(res.Image), view)
	if err != nil || !built {
		t.Fatalf("ErofsOf: %s built=%v %v", p, built, err)
	}
	if p2, built, err := c.Erofs(context.Background(), res.Image, view); err != nil || built || p2 != p {
		t.Errorf("Cache.Erofs after ErofsOf: %s built=%v %v, want %s cached", p2, built, err, p)
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "erofs", "-o", "ro,loop", p, mnt).CombinedOutput(); err != nil {
		t.Fatalf("mounting the erofs image: %v: %s", err, out)
	}
	defer exec.Command("umount", mnt).Run()
	if got, want := tree(t, mnt), tree(t, fmt.Sprintf("/proc/self/fd/%d/", view.Fd())); !slices.Equal(got, want) {
		t.Errorf("the erofs image differs from the view:\n got %q\nwant %q", got, want)
	}
}

// pulledView pulls an image of layers into a new cache and opens the view
// the ns rung mounts of it, closed when the test ends.
func pulledView(t *testing.T, layers ...[]ent) (*Cache, *PullResult, *os.File) {
	t.Helper()
	c, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := pullLayers(t, c, layers...)
	if err != nil {
		t.Fatal(err)
	}
	view, err := linuxns.ImageView(linuxns.Name, c.LayerDirs(res.Image))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { view.Close() })
	return c, res, view
}
