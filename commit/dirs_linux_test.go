package commit

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// walkBeneath (darwin's) refuses what openat2's RESOLVE_BENEATH|NO_SYMLINKS
// refuses, with the same errors, and reaches what it reaches: a symlink at
// any level (to a dir inside or outside), a file on the way, "..", and a
// path deeper than PATH_MAX through the dirs cache.
func TestWalkBeneath(t *testing.T) {
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	root := filepath.Join(base, "root")
	for _, d := range []string{outside, root, root + "/a", root + "/a/b", outside + "/b"} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(root+"/a/f", nil, 0o644)
	os.Symlink(outside, root+"/out")
	os.Symlink("b", root+"/a/in")
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rfd)
	for _, c := range []struct {
		rel  string
		want error // nil: opens
	}{
		{"a", nil}, {"a/b", nil},
		{"out", unix.ELOOP}, {"out/b", unix.ELOOP}, {"a/in", unix.ELOOP},
		{"a/f", unix.ENOTDIR}, {"a/f/x", unix.ENOTDIR},
		{"..", unix.EXDEV}, {"a/../..", unix.EXDEV}, {"nope", unix.ENOENT},
	} {
		for name, open := range map[string]func(int, string) (int, error){"openat2": openBeneath, "walk": walkBeneath} {
			fd, err := open(rfd, c.rel)
			if err == nil {
				unix.Close(fd)
			}
			if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) && !(c.want == unix.ELOOP && name == "walk" && errors.Is(err, unix.ENOTDIR)) {
				t.Errorf("%s(%q): %v, want %v", name, c.rel, err, c.want)
			}
			if c.want != nil && !unsafeErr(err) && c.want != unix.ENOENT {
				t.Errorf("%s(%q): %v is not an unsafe path to commit", name, c.rel, err)
			}
		}
	}

	// Deeper than PATH_MAX, through the cache's pieces.
	deep := root
	for range 900 {
		deep += "/dddddddd"
	}
	mkdirDeep(t, root, strings.Count(deep[len(root):], "/"))
	dc := newDirsFor(Options{walkDirs: true})
	defer dc.close()
	fd, err := dc.open(deep)
	if err != nil {
		t.Fatalf("open of a %d-byte path: %v", len(deep), err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		t.Fatalf("fstat: %v %o", err, st.Mode)
	}
}

// mkdirDeep makes levels dirs named dddddddd beneath root, one at a time
// relative to the last (a whole path would be too long).
func mkdirDeep(t *testing.T, root string, levels int) {
	t.Helper()
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range levels {
		if err := unix.Mkdirat(fd, "dddddddd", 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			t.Fatal(err)
		}
		nfd, err := unix.Openat(fd, "dddddddd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = nfd
	}
	unix.Close(fd)
}
