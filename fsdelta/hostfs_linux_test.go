package fsdelta

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/internal/testreq"
)

// hostFSes are both ways the Differ reaches the host: Linux's openat2 and
// the portable walk darwin uses, which the hostile tests run through too.
var hostFSes = []struct {
	name string
	fs   hostFS
}{{"openat2", kernelHostFS{}}, {"walk", walkHostFS{}}}

// The portable walk refuses, one name at a time, everything openat2's
// RESOLVE_BENEATH|NO_SYMLINKS|NO_XDEV refuses: "..", a name with a "/", a
// symlink (to a dir or a file), a mount point; it never blocks on a fifo;
// and its root walk follows no symlink on the way.
func TestWalkHostFSRefuses(t *testing.T) {
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	root := filepath.Join(base, "root")
	for _, d := range []string{outside, root, filepath.Join(root, "sub"), filepath.Join(root, "mnt")} {
		must(t, os.Mkdir(d, 0o755))
	}
	must(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("S\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "sub", "f"), []byte("F\n"), 0o644))
	must(t, os.Symlink(outside, filepath.Join(root, "ldir")))
	must(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "lfile")))
	must(t, os.Symlink(root, filepath.Join(base, "rootlink")))
	must(t, unix.Mkfifo(filepath.Join(root, "fifo"), 0o644))
	mounted := false
	if os.Geteuid() == 0 {
		if err := unix.Mount("tmpfs", filepath.Join(root, "mnt"), "tmpfs", 0, "size=1m"); err != nil {
			testreq.Needf(t, testreq.Kernel, "tmpfs mount", err)
		}
		mounted = true
		t.Cleanup(func() { unix.Unmount(filepath.Join(root, "mnt"), unix.MNT_DETACH) })
	}

	for _, h := range hostFSes {
		t.Run(h.name, func(t *testing.T) {
			if _, err := h.fs.openRoot(filepath.Join(base, "rootlink")); !gone(err) {
				t.Errorf("openRoot through a symlink: %v, want ELOOP", err)
			}
			if _, err := h.fs.openRoot(filepath.Join(base, "rootlink", "sub")); !gone(err) {
				t.Errorf("openRoot through a symlink on the way: %v, want ELOOP", err)
			}
			fd, err := h.fs.openRoot(root)
			must(t, err)
			defer unix.Close(fd)
			for _, name := range []string{"..", "ldir", "lfile"} {
				for _, flags := range []int{oSearch | unix.O_DIRECTORY, unix.O_RDONLY | unix.O_DIRECTORY, unix.O_RDONLY | unix.O_NOFOLLOW} {
					if nfd, err := h.fs.openAt(fd, name, flags); !gone(err) {
						if err == nil {
							unix.Close(nfd)
						}
						t.Errorf("openAt(%q, %#x): %v, want nothing there", name, flags, err)
					}
				}
			}
			if mounted {
				if nfd, err := h.fs.openAt(fd, "mnt", oSearch|unix.O_DIRECTORY); !errors.Is(err, unix.EXDEV) {
					if err == nil {
						unix.Close(nfd)
					}
					t.Errorf("openAt of a mount point: %v, want EXDEV", err)
				}
				if _, _, err := h.fs.statAt(fd, "mnt"); !errors.Is(err, unix.EXDEV) {
					t.Errorf("statAt of a mount point: %v, want EXDEV", err)
				}
			}
			if _, _, err := h.fs.statAt(fd, ".."); !gone(err) {
				t.Errorf("statAt(..): %v, want nothing there", err)
			}
			st, link, err := h.fs.statAt(fd, "lfile")
			must(t, err)
			if st.Mode&unix.S_IFMT != unix.S_IFLNK || link != filepath.Join(outside, "secret") {
				t.Errorf("statAt(lfile) = mode %o link %q, want the symlink itself", st.Mode, link)
			}
			sub, err := h.fs.openAt(fd, "sub", oSearch|unix.O_DIRECTORY)
			must(t, err)
			defer unix.Close(sub)
			if _, err := h.fs.openAt(sub, "f/..", unix.O_RDONLY); err == nil || h.name == "walk" && !errors.Is(err, unix.EXDEV) {
				t.Errorf("openAt(f/..): %v, want refused", err)
			}
			f, err := h.fs.openAt(sub, "f", unix.O_RDONLY|unix.O_NOFOLLOW)
			must(t, err)
			unix.Close(f)
		})
	}
	// A fifo where a file was expected: openat2 would block in open (the
	// Differ only opens what it looked up as a file); the walk must not.
	if _, err := (walkHostFS{}).openAt(mustOpen(t, root), "fifo", unix.O_RDONLY|unix.O_NOFOLLOW); !errors.Is(err, unix.ENXIO) {
		t.Errorf("walk openAt of a fifo: %v, want ENXIO", err)
	}
}

func mustOpen(t *testing.T, p string) int {
	t.Helper()
	fd, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}
