package vm

import (
	"encoding/json"
	"errors"
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

// TestNetRefused: a network other than none is refused with an
// IsolationUnavailableError naming what is missing, before any VM boots.
func TestNetRefused(t *testing.T) {
	r := testRung(t)
	for _, net := range [][]string{{"allow:example.com"}, {"none", "mock:x.yaml"}} {
		_, err := r.Trial(t.Context(), dryexec.TrialSpec{Net: net, Action: dryexec.Action{Argv: []string{"true"}, Cwd: t.TempDir()}})
		var iu *dryexec.IsolationUnavailableError
		if !errors.As(err, &iu) || !strings.Contains(iu.Missing, "network") {
			t.Errorf("--net %q: %v, want an IsolationUnavailableError about the network", net, err)
		}
	}
}
