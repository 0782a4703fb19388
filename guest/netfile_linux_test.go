package guest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestWriteNetFile: the trust bundle the guest makes is the host's roots,
// a newline if they lack one, and netsim's CA, as netsim's CA.Bundle
// makes it on the host; missing or empty roots leave the CA alone.
func TestWriteNetFile(t *testing.T) {
	const ca = "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n"
	for _, tc := range []struct {
		name   string
		system *string // nil: no such file
		want   string
	}{
		{"roots ending in a newline", ptr("ROOT1\nROOT2\n"), "ROOT1\nROOT2\n" + ca},
		{"roots without a final newline", ptr("ROOT1\nROOT2"), "ROOT1\nROOT2\n" + ca},
		{"empty roots", ptr(""), ca},
		{"no roots", nil, ca},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			system := filepath.Join(dir, "roots.crt")
			if tc.system != nil {
				if err := os.WriteFile(system, []byte(*tc.system), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			out := filepath.Join(dir, "bundle")
			if err := writeNetFile(out, system, []byte(ca)); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("bundle %q, want %q", got, tc.want)
			}
			if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o444 {
				t.Fatalf("bundle mode %v (%v), want 0444", fi.Mode(), err)
			}
		})
	}
}

// TestWriteNetFileAcrossFileSystems: the host's roots on one file system
// (the test's temp dir) and the bundle on a tmpfs, as the scratch is, the
// roots larger than one chunk of any copy: the bundle is still every byte
// of them, then the CA. (copy_file_range fails across file systems; the
// copy must not lose or reorder what it copies another way.)
func TestWriteNetFileAcrossFileSystems(t *testing.T) {
	var src, dst unix.Statfs_t
	dir := t.TempDir()
	shm, err := os.MkdirTemp("/dev/shm", "netfile")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	defer os.RemoveAll(shm)
	if unix.Statfs(dir, &src) != nil || unix.Statfs(shm, &dst) != nil || src.Fsid == dst.Fsid {
		t.Skipf("%s and %s are not two file systems", dir, shm)
	}
	var roots strings.Builder
	for i := 0; roots.Len() < 3<<20; i++ {
		fmt.Fprintf(&roots, "-----BEGIN CERTIFICATE-----\nROOT %d\n-----END CERTIFICATE-----\n", i)
	}
	system := filepath.Join(dir, "roots.crt")
	if err := os.WriteFile(system, []byte(roots.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	const ca = "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n"
	out := filepath.Join(shm, "bundle")
	if err := writeNetFile(out, system, []byte(ca)); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if want := roots.String() + ca; string(got) != want {
		t.Fatalf("bundle of %d bytes, want %d (the roots, then the CA)", len(got), len(want))
	}
}

func ptr(s string) *string { return &s }
