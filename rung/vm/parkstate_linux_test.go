package vm

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
)

// A park directory is writable by whoever can write the store: between the
// server's check of the saved state and Resume's open, it may have become a
// FIFO (whose open would block the resume forever) or a link to a host
// file (which QEMU, or Firecracker, would then read as the VM's state or
// memory). Resume refuses both before it starts anything, QEMU's saved
// state and each of Firecracker's two files; no VM is needed to see it.
func TestResumeStateNotRegular(t *testing.T) {
	host := filepath.Join(t.TempDir(), "host-file")
	if err := os.WriteFile(host, []byte("not a VM"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, plant := range map[string]func(string) error{
		"fifo":    func(p string) error { return unix.Mkfifo(p, 0o600) },
		"symlink": func(p string) error { return os.Symlink(host, p) },
		"dir":     func(p string) error { return os.Mkdir(p, 0o700) },
	} {
		for _, files := range [][]string{{ParkFile}, {FCStateFile, FCMemFile}, {FCMemFile, FCStateFile}} {
			dir := t.TempDir()
			// The other files are regular: the planted one is refused.
			for _, f := range files[1:] {
				if err := os.WriteFile(filepath.Join(dir, f), []byte("saved"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := plant(filepath.Join(dir, files[0])); err != nil {
				t.Fatal(err)
			}
			sb, err := (&Rung{}).Resume(context.Background(), dryexec.SandboxSpec{}, dir)
			if err == nil {
				sb.Close()
				t.Errorf("%s as %s: resumed", name, files[0])
				continue
			}
			if !strings.Contains(err.Error(), "resuming a vm session") || !strings.Contains(err.Error(), files[0]) {
				t.Errorf("%s as %s: %v", name, files[0], err)
			}
		}
	}
	if b, _ := os.ReadFile(host); string(b) != "not a VM" {
		t.Errorf("the host file: %q", b)
	}
}
