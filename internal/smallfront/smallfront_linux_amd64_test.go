package smallfront

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestInstall: Install replaces what is at the path with an executable
// small front, leaves no temporary file beside it, and the program it
// wrote runs: with nothing beside it to hand over to, it says how to get
// the Go front and exits 125.
func TestInstall(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "dryexec")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Install(p); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o755 || fi.Size() != int64(len(frontELF)) {
		t.Fatalf("%v %v", fi, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("left beside it: %v", ents)
	}
	cmd := exec.Command(p, "ls")
	cmd.Env = []string{}
	out, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 125 || !strings.Contains(string(out), GoFrontName) || !strings.Contains(string(out), "make build") {
		t.Fatalf("%v: %s", err, out)
	}
}
