package linuxns

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/dryexec/dryexec"
)

// TestSpilledDelta: a trial given a spill dir that changes thousands of paths
// keeps them out of memory (a FileSource in the spill dir, unlinked at once)
// and its delta is, field for field, the one the same trial gives in memory:
// created, modified and deleted files, dirs, symlinks and hard links, in the
// same order.
func TestSpilledDelta(t *testing.T) {
	requireNS(t)
	const script = `set -e
mkdir -p many keep
i=0
while [ $i -lt 60 ]; do mkdir many/d$i; j=0; while [ $j -lt 100 ]; do echo "$i $j" > many/d$i/f$j; j=$((j+1)); done; i=$((i+1)); done
echo changed >> keep/a
rm keep/b
ln -s ../keep/a many/ln
ln many/d0/f0 many/hard
rm -r gone
`
	fresh := func() string {
		dir := t.TempDir()
		for p, c := range map[string]string{"keep/a": "a\n", "keep/b": "b\n", "gone/x/y": "y\n", "gone/z": "z\n"} {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dir+"/"+p, []byte(c), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	spillDir := t.TempDir()
	dir := fresh()
	spilled := runTrial(t, dir, dryexec.TrialSpec{SpillDir: spillDir}, "/bin/sh", "-c", script)
	if !spilled.Spilled() {
		t.Fatalf("%d changes, not spilled", spilled.NumFiles())
	}
	if ents, _ := os.ReadDir(spillDir); len(ents) != 0 {
		t.Fatalf("the spill dir holds %d entries: the spilled changes must be unlinked", len(ents))
	}
	inMemory := runTrial(t, dir, dryexec.TrialSpec{}, "/bin/sh", "-c", script)
	if inMemory.Spilled() {
		t.Fatal("a trial without a spill dir spilled")
	}
	if spilled.NumFiles() < 6000 || spilled.NumFiles() != inMemory.NumFiles() {
		t.Fatalf("%d changes spilled, %d in memory", spilled.NumFiles(), inMemory.NumFiles())
	}
	a, b := comparable(t, spilled), comparable(t, inMemory)
	if a != b {
		t.Fatalf("spilled and in-memory deltas differ:\nspilled:   %.2000s\nin memory: %.2000s", a, b)
	}
}

// comparable is d as JSON without what differs between two runs of one
// trial: its id, timings, memory and mtimes.
func comparable(t *testing.T, d *dryexec.StateDelta) string {
	t.Helper()
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return regexp.MustCompile(`"(trial_id|duration_ns|cpu_user_ns|cpu_sys_ns|peak_rss_bytes|pages_written|bytes_written|mtime_ns)":("[^"]*"|[0-9]+)`).
		ReplaceAllString(string(b), `"$1":_`)
}
