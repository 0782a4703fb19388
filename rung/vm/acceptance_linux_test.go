package vm

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/acceptance"
)

// TestAcceptance: the core scenario gives exactly its delta on vm, and the
// host is untouched.
func TestAcceptance(t *testing.T) {
	r := testRung(t)
	dir := t.TempDir()
	if err := acceptance.MakeDir(dir); err != nil {
		t.Fatal(err)
	}
	d := runTrial(t, r, dir, dryexec.TrialSpec{}, "/bin/sh", "-c", acceptance.Script)
	b, _ := json.MarshalIndent(d, "", " ")
	t.Logf("%s", b)
	if d.Rung != Name || d.Incomplete {
		t.Fatalf("rung %q incomplete %v (%s)", d.Rung, d.Incomplete, d.IncompleteReason)
	}
	if err := acceptance.Check(d, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a.txt")); err == nil {
		t.Fatal("a.txt reached the host")
	}
	if !strings.Contains(strings.Join(d.Warnings, "\n"), "accel=") {
		t.Errorf("the delta does not say which accelerator ran: %q", d.Warnings)
	}
}
