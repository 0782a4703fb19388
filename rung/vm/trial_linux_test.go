package vm

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/schema"
)

// testRung returns a rung on the static guest binary, skipping (or, where
// required, failing) the test on a host where no VM boots.
func testRung(t *testing.T) *Rung {
	t.Helper()
	if testing.Short() {
		t.Skip("boots a VM")
	}
	r := &Rung{GuestExe: staticGuest(t)}
	// Where DRYEXEC_REQUIRE names vm (CI: `make deps` installs QEMU and
	// the kernel), its absence fails the test instead of skipping it.
	testreq.Need(t, testreq.VM, r.Available(context.Background()))
	return r
}

var testPath = map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}

// runTrial runs argv in dir on r and checks the delta against the schema.
func runTrial(t *testing.T, r dryexec.Rung, dir string, spec dryexec.TrialSpec, argv ...string) *dryexec.StateDelta {
	t.Helper()
	spec.Action.Argv, spec.Action.Cwd = argv, dir
	if spec.Action.Env == nil {
		spec.Action.Env = testPath
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	d, err := r.Trial(ctx, spec)
	if err != nil {
		t.Fatalf("%s trial %q: %v", r.Name(), argv, err)
	}
	v, err := schema.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Validate(b); err != nil {
		t.Fatalf("delta does not validate: %v\n%s", err, b)
	}
	return d
}

func TestTrialWritesStayInDelta(t *testing.T) {
	r := testRung(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "old"), []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := runTrial(t, r, dir, dryexec.TrialSpec{}, "sh", "-c", "echo hi; echo err >&2; echo new > new; rm old; uname -r; exit 3")
	t.Logf("delta: exit %d stdout %q stderr %q files %d warnings %q", d.Process.ExitCode, d.Process.Stdout, d.Process.Stderr, len(d.Files), d.Warnings)
	if d.Process.ExitCode != 3 || d.Incomplete {
		t.Fatalf("exit %d incomplete %v (%s)", d.Process.ExitCode, d.Incomplete, d.IncompleteReason)
	}
	if _, err := os.Stat(filepath.Join(dir, "new")); !os.IsNotExist(err) {
		t.Errorf("the trial wrote the host: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "old")); err != nil {
		t.Errorf("the trial removed a host file: %v", err)
	}
	got := map[string]string{}
	for _, f := range d.Files {
		got[f.Path] = string(f.Op)
	}
	if got[filepath.Join(dir, "new")] != "create" || got[filepath.Join(dir, "old")] != "delete" {
		t.Errorf("files %v", got)
	}
}
