package guest

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/image"
	"github.com/dryexec/dryexec/internal/testreq"
)

// TestUpperTarRoundTrip: what a real overlay leaves in its upper dir (a
// whiteout, an opaque dir, a hard link, a FIFO, a setuid file, sub-second
// times, a user xattr, files named as a layer's marks) goes through writeUpperTar, as a VM's guest exports
// it, and image.UnpackUpper, as the host takes it back, into the same upper
// dir: the same entries, kinds, modes, times and overlay marks, and none of
// overlay's other trusted.* bookkeeping.
func TestUpperTarRoundTrip(t *testing.T) {
	testreq.NeedRoot(t)
	base := t.TempDir()
	if err := unix.Mount("tmpfs", base, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(base, unix.MNT_DETACH)
	lower, upper, work, merged := base+"/l", base+"/u", base+"/w", base+"/m"
	for _, d := range []string{lower, lower + "/opq", lower + "/d", upper, work, merged} {
		must(t, os.Mkdir(d, 0o755))
	}
	for _, f := range []string{lower + "/gone", lower + "/opq/old", lower + "/d/keep"} {
		must(t, os.WriteFile(f, []byte("lower\n"), 0o644))
	}
	must(t, unix.Mount("overlay", merged, "overlay", 0, "lowerdir="+lower+",upperdir="+upper+",workdir="+work+",metacopy=off,index=off,redirect_dir=nofollow"))
	m := merged
	must(t, os.Remove(m+"/gone"))
	must(t, os.RemoveAll(m+"/opq"))
	must(t, os.Mkdir(m+"/opq", 0o750))
	must(t, os.WriteFile(m+"/opq/new", []byte("new\n"), 0o644))
	must(t, os.WriteFile(m+"/d/keep", []byte("changed\n"), 0o755))
	must(t, unix.Chmod(m+"/d/keep", 0o4755))
	must(t, os.Link(m+"/d/keep", m+"/d/link"))
	must(t, unix.Mkfifo(m+"/d/p", 0o600))
	must(t, unix.Setxattr(m+"/opq/new", "user.note", []byte("hi"), 0))
	// Files a command may name as a layer's marks are files.
	must(t, os.WriteFile(m+"/d/.wh.keep", []byte("a\n"), 0o644))
	must(t, os.WriteFile(m+"/d/.wh..wh..opq", []byte("b\n"), 0o644))
	ts := []unix.Timespec{{Sec: 1600000000, Nsec: 123456789}, {Sec: 1600000000, Nsec: 987654321}}
	must(t, unix.UtimesNanoAt(unix.AT_FDCWD, m+"/opq/new", ts, 0))
	must(t, unix.Unmount(merged, 0))

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	u, err := os.Open(upper)
	must(t, err)
	defer u.Close()
	must(t, writeUpperTar(tw, u))
	must(t, tw.Close())
	back := base + "/back"
	must(t, os.Mkdir(back, 0o755))
	if _, err := image.UnpackUpper(t.Context(), &buf, back, nil); err != nil {
		t.Fatal(err)
	}

	var st unix.Stat_t
	must(t, unix.Lstat(back+"/gone", &st))
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("gone: mode %o rdev %d, want the whiteout (char 0/0)", st.Mode, st.Rdev)
	}
	v := make([]byte, 8)
	if n, err := unix.Lgetxattr(back+"/opq", "trusted.overlay.opaque", v); err != nil || string(v[:n]) != "y" {
		t.Errorf("opq: opaque %q, %v; want y", v[:n], err)
	}
	for name, want := range map[string]string{".wh.keep": "a\n", ".wh..wh..opq": "b\n"} {
		if b, err := os.ReadFile(back + "/d/" + name); err != nil || string(b) != want {
			t.Errorf("d/%s: %q, %v; want the file", name, b, err)
		}
	}
	if _, err := unix.Lgetxattr(back+"/d", "trusted.overlay.opaque", v); err == nil {
		t.Errorf("d: a file named .wh..wh..opq made it opaque")
	}
	if _, err := unix.Lgetxattr(back+"/d", "trusted.overlay.origin", v); err == nil {
		t.Errorf("d: overlay's origin xattr came back")
	}
	must(t, unix.Lstat(back+"/opq", &st))
	if st.Mode&0o7777 != 0o750 {
		t.Errorf("opq: mode %o, want 750", st.Mode&0o7777)
	}
	must(t, unix.Lstat(back+"/opq/new", &st))
	if st.Mtim != ts[1] {
		t.Errorf("opq/new: mtime %v, want %v (sub-second kept)", st.Mtim, ts[1])
	}
	if n, err := unix.Lgetxattr(back+"/opq/new", "user.note", v); err != nil || string(v[:n]) != "hi" {
		t.Errorf("opq/new: user.note %q, %v", v[:n], err)
	}
	var keep, link unix.Stat_t
	must(t, unix.Lstat(back+"/d/keep", &keep))
	must(t, unix.Lstat(back+"/d/link", &link))
	if keep.Ino != link.Ino || keep.Mode&0o7777 != 0o4755 {
		t.Errorf("d/keep: mode %o, inode %d; d/link inode %d: want 4755, one inode", keep.Mode&0o7777, keep.Ino, link.Ino)
	}
	if b, _ := os.ReadFile(back + "/d/keep"); string(b) != "changed\n" {
		t.Errorf("d/keep: %q", b)
	}
	must(t, unix.Lstat(back+"/d/p", &st))
	if st.Mode&unix.S_IFMT != unix.S_IFIFO || st.Mode&0o777 != 0o600 {
		t.Errorf("d/p: mode %o, want a FIFO 600", st.Mode)
	}
	if _, err := os.Lstat(filepath.Join(back, "opq", "old")); err == nil {
		t.Errorf("opq/old came back")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestDirectWriter: the export's writer puts the bytes at its offset in
// whole blocks (O_DIRECT's rule), the last one padded with zeros, across
// its buffer's refills.
func TestDirectWriter(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "drive"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dw, err := newDirectWriter(f, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer dw.free()
	want := make([]byte, 3<<20+123)
	for i := range want {
		want[i] = byte(i*7 + i>>12)
	}
	for b := want; len(b) > 0; {
		n := min(len(b), 70001)
		if _, err := dw.Write(b[:n]); err != nil {
			t.Fatal(err)
		}
		b = b[n:]
	}
	if err := dw.flush(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	padded := (len(want) + 4095) / 4096 * 4096
	if len(got) != 4096+padded || !bytes.Equal(got[4096:4096+len(want)], want) || bytes.ContainsFunc(got[4096+len(want):], func(r rune) bool { return r != 0 }) {
		t.Errorf("drive of %d bytes, want %d: the data at 4096, then zeros", len(got), 4096+padded)
	}
}
