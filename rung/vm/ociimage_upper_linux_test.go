package vm

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/wire"
)

// TestImportUpperUntrusted: the upper drive is written by the VM, which the
// host does not trust. Whatever it holds, the host only reads it as bytes
// and unpacks it beneath the trial's upper dir: no tar without the magic
// (a VM that died mid-export), no length past the drive, no entry above
// the upper dir or through a symlink the VM made, no device node, no
// trusted.* xattr that would forge overlay's redirects or opaque dirs.
func TestImportUpperUntrusted(t *testing.T) {
	testreq.NeedRoot(t)
	type entry struct {
		h    tar.Header
		body string
	}
	outside := t.TempDir()
	cases := []struct {
		name    string
		entries []entry
		magic   bool
		length  int64 // 0: the tar's
		wantErr error // nil: any error, unless ok
		ok      bool
		check   func(t *testing.T, upper string)
	}{
		{name: "no magic", entries: []entry{{h: tar.Header{Name: "f", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}, body: "x"}}, wantErr: errNoUpper},
		{name: "length past the drive", magic: true, length: 1 << 40, wantErr: errNoUpper},
		{name: "dot-dot", magic: true, entries: []entry{{h: tar.Header{Name: "../../escape", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}, body: "x"}}},
		{name: "through a symlink", magic: true, entries: []entry{
			{h: tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: outside}},
			{h: tar.Header{Name: "l/planted", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}, body: "x"}}},
		{name: "devices and trusted xattrs", magic: true, ok: true, entries: []entry{
			{h: tar.Header{Name: "null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3, Mode: 0o666}},
			{h: tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755, PAXRecords: map[string]string{
				"SCHILY.xattr.trusted.overlay.redirect": "/etc", "SCHILY.xattr.trusted.overlay.opaque": "y"}}},
			{h: tar.Header{Name: "d/f", Typeflag: tar.TypeReg, Size: 2, Mode: 0o644}, body: "ok"}},
			check: func(t *testing.T, upper string) {
				if _, err := os.Lstat(upper + "/null"); err == nil {
					t.Errorf("a device node was made")
				}
				v := make([]byte, 16)
				for _, k := range []string{"trusted.overlay.redirect", "trusted.overlay.opaque"} {
					if _, err := unix.Lgetxattr(upper+"/d", k, v); err == nil {
						t.Errorf("%s was set", k)
					}
				}
				if b, _ := os.ReadFile(upper + "/d/f"); string(b) != "ok" {
					t.Errorf("d/f: %q", b)
				}
			}},
		{name: "overlay's marks, and layer marks as names", magic: true, ok: true, entries: []entry{
			{h: tar.Header{Name: ".wh.foo", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}, body: "a"},
			{h: tar.Header{Name: "gone", Typeflag: tar.TypeChar, Mode: 0o644}},
			{h: tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755, PAXRecords: map[string]string{wire.VMUpperOpaque: "y"}}},
			{h: tar.Header{Name: "d/.wh..wh..opq", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}, body: "b"},
			{h: tar.Header{Name: "e/", Typeflag: tar.TypeDir, Mode: 0o755}},
			{h: tar.Header{Name: "e/.wh..wh..opq", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}, body: "c"}},
			check: func(t *testing.T, upper string) {
				for p, want := range map[string]string{".wh.foo": "a", "d/.wh..wh..opq": "b", "e/.wh..wh..opq": "c"} {
					if b, err := os.ReadFile(filepath.Join(upper, p)); err != nil || string(b) != want {
						t.Errorf("%s: %q, %v; want the file the command made", p, b, err)
					}
				}
				if _, err := os.Lstat(upper + "/foo"); err == nil {
					t.Errorf(".wh.foo made a whiteout of foo")
				}
				var st unix.Stat_t
				if err := unix.Lstat(upper+"/gone", &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
					t.Errorf("gone: %v, mode %o; want the whiteout", err, st.Mode)
				}
				v := make([]byte, 4)
				if _, err := unix.Lgetxattr(upper+"/d", "trusted.overlay.opaque", v); err != nil {
					t.Errorf("d: not opaque: %v", err)
				}
				if _, err := unix.Lgetxattr(upper+"/e", "trusted.overlay.opaque", v); err == nil {
					t.Errorf("e: a file named .wh..wh..opq made it opaque")
				}
			}},
		{name: "whiteout through a symlink", magic: true, entries: []entry{
			{h: tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: outside}},
			{h: tar.Header{Name: "l/planted", Typeflag: tar.TypeChar}}}},
		{name: "opaque through a symlink", magic: true, entries: []entry{
			{h: tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: outside}},
			{h: tar.Header{Name: "l/planted/", Typeflag: tar.TypeDir, Mode: 0o755, PAXRecords: map[string]string{wire.VMUpperOpaque: "y"}}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			scratch := t.TempDir()
			upper := filepath.Join(scratch, "u", "0")
			if err := os.MkdirAll(upper, 0o755); err != nil {
				t.Fatal(err)
			}
			sfd, err := unix.Open(scratch, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(sfd)
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			for _, e := range c.entries {
				h := e.h
				h.Format = tar.FormatPAX
				if err := tw.WriteHeader(&h); err != nil {
					t.Fatal(err)
				}
				tw.Write([]byte(e.body))
			}
			tw.Close()
			drive, err := os.CreateTemp(t.TempDir(), "upper")
			if err != nil {
				t.Fatal(err)
			}
			drive.WriteAt(buf.Bytes(), wire.VMUpperOffset)
			if c.magic {
				head := append([]byte(wire.VMUpperMagic), make([]byte, 8)...)
				n := c.length
				if n == 0 {
					n = int64(buf.Len())
				}
				binary.LittleEndian.PutUint64(head[len(wire.VMUpperMagic):], uint64(n))
				drive.WriteAt(head, 0)
			}
			tr := &trial{r: &Rung{}, upperDrive: drive}
			tr.ScratchFD = sfd
			defer tr.closeImage()
			err = tr.importUpper(t.Context())
			switch {
			case c.ok && err != nil:
				t.Fatalf("importUpper: %v", err)
			case !c.ok && err == nil:
				t.Fatalf("importUpper took it")
			case c.wantErr != nil && !errors.Is(err, c.wantErr):
				t.Fatalf("importUpper: %v, want %v", err, c.wantErr)
			}
			for _, p := range []string{filepath.Join(scratch, "escape"), filepath.Join(scratch, "u", "escape"), filepath.Join(outside, "planted")} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s was written, outside the upper dir", p)
				}
			}
			if c.wantErr != nil {
				if ents, _ := os.ReadDir(upper); len(ents) != 0 {
					t.Errorf("the upper dir holds %d entries after a refused drive", len(ents))
				}
			}
			if c.check != nil {
				c.check(t, upper)
			}
		})
	}
}
