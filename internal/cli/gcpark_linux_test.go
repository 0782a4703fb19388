package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gc removes a park that cannot be resumed (here: a saved state whose
// record was never written, as a crash mid-park leaves it) and says so.
func TestGCParkedSession(t *testing.T) {
	home := t.TempDir()
	park := filepath.Join(home, "parked", "se_"+strings.Repeat("a", 20))
	if err := os.MkdirAll(park, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(park, "vm.state"), []byte("state"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := cli(t, home, "gc")
	if code != 0 || !strings.Contains(out, "gc: removed parked session se_"+strings.Repeat("a", 20)+" (5 B): ") || !strings.Contains(out, "no record") {
		t.Fatalf("gc: %d\n%s%s", code, out, errs)
	}
	if _, err := os.Stat(park); !os.IsNotExist(err) {
		t.Fatalf("the park survived gc: %v", err)
	}
}
