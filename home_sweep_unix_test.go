//go:build unix

package dryexec

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// TestSweepPrivateTemp: what a process that is gone left in PrivateTemp's
// dir is removed; this process's own dir, and an entry without a pid, stay.
func TestSweepPrivateTemp(t *testing.T) {
	home := t.TempDir()
	getenv := func(k string) string {
		if k == "DRYEXEC_HOME" {
			return home
		}
		return ""
	}
	mine, err := PrivateTemp(getenv, "fork-")
	if err != nil {
		t.Fatal(err)
	}
	// A pid that ran and is gone (reaped: no zombie holds it).
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(home, "tmp", "fork-"+strconv.Itoa(c.Process.Pid)+"-123")
	other := filepath.Join(home, "tmp", "notes")
	for _, d := range []string{dead + "/uppers", other} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	n, err := SweepPrivateTemp(getenv)
	if err != nil || n != 1 {
		t.Fatalf("SweepPrivateTemp = %d, %v; want 1 removed", n, err)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("a dead process's %s is still there (%v)", dead, err)
	}
	for _, d := range []string{mine, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
}
