package cli

import (
	"strings"
	"testing"
)

// TestRunSummaryScales: a real trial that creates a tree of 2,000 files and
// edits one prints about one screen, the tree collapsed to a line of counts
// and the headline counting the edit; show --files lists every change; --json
// has them all.
func TestRunSummaryScales(t *testing.T) {
	requireNS(t)
	dir, home := t.TempDir(), t.TempDir()
	writeFile(t, dir, "a.txt", "a\n")
	script := `echo b > a.txt; mkdir -p v/lib; i=0; while [ $i -lt 2000 ]; do echo $i > v/lib/f$i; i=$((i+1)); done`
	code, out, errs := cli(t, home, "run", "-C", dir, "--", "sh", "-c", script)
	if code == ExitInternal || code == ExitUsage {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"2,003 files changed (2,002 created, 1 modified, 0 deleted, 8.7 KiB written)",
		"  ~ a.txt",
		"  + v/lib/ — 2,002 files created, 8.7 KiB",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("no line %q in\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\n"); n > 40 {
		t.Errorf("the summary of 2,003 changes is %d lines:\n%s", n, out)
	}
	id := strings.Fields(out)[1]
	if !strings.Contains(out, "dryexec show "+id+" --files") {
		t.Errorf("no pointer to show --files:\n%s", out)
	}
	_, full, _ := cli(t, home, "show", id, "--files")
	if n := strings.Count(full, "\n  + "+dir+"/v/lib/f"); n != 2000 {
		t.Errorf("show --files lists %d of the 2,000 files", n)
	}
	_, js, _ := cli(t, home, "show", "--json", id)
	if d := decode(t, js); d.NumFiles() != 2003 {
		t.Errorf("--json has %d changes", d.NumFiles())
	}
}
