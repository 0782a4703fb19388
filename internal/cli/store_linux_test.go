package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestStoreCleansItself: committing a 4 MiB write drops its content from the
// store at once (ls's size says so), ls lists newest first by when each
// trial was made (a commit of the older one does not move it up), and gc
// prunes and says what is left.
func TestStoreCleansItself(t *testing.T) {
	requireNS(t)
	dir, home := t.TempDir(), t.TempDir()
	storeSize := func() float64 {
		t.Helper()
		_, out, errs := cli(t, home, "ls")
		m := regexp.MustCompile(`store: (\d+) trials?, ([\d.]+) (B|KiB|MiB|GiB) in `).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("ls says nothing of the store's size:\n%s%s", out, errs)
		}
		v, _ := strconv.ParseFloat(m[2], 64)
		return v * map[string]float64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[m[3]]
	}
	_, out, errs := cli(t, home, "run", "--json", "-C", dir, "--", "sh", "-c", "head -c 4194304 /dev/urandom > big")
	older := decode(t, out).TrialID
	if older == "" {
		t.Fatal(errs)
	}
	_, out, _ = cli(t, home, "run", "--json", "-C", dir, "--", "sh", "-c", "echo small > small")
	newer := decode(t, out).TrialID
	if n := storeSize(); n < 4<<20 {
		t.Fatalf("the store holds %.0f bytes before the commit", n)
	}
	if code, _, errs := cli(t, home, "commit", older); code != 0 {
		t.Fatalf("commit: %d %s", code, errs)
	}
	if fi, err := os.Stat(filepath.Join(dir, "big")); err != nil || fi.Size() != 4<<20 {
		t.Fatalf("big on the host: %v", err)
	}
	if n := storeSize(); n > 512<<10 {
		t.Errorf("the store still holds %.0f bytes after the commit", n)
	}
	_, out, _ = cli(t, home, "ls")
	if i, j := strings.Index(out, newer), strings.Index(out, older); i < 0 || j < 0 || i > j {
		t.Errorf("ls is not newest first by creation:\n%s", out)
	}
	code, out, errs := cli(t, home, "gc")
	if code != 0 || !strings.Contains(out, "gc: removed 0 trials, dropped the content of 0 finished trials, freed ") ||
		!strings.Contains(out, "the store holds 2 trials") {
		t.Errorf("gc: %d\n%s%s", code, out, errs)
	}
	// Expired trials go with gc (a TTL shorter than their age).
	code, out, errs = cliWith(t, home, map[string]string{"DRYEXEC_TRIAL_TTL": "1ns"}, "gc")
	if code != 0 || !strings.Contains(out, "gc: removed 2 trials") || !strings.Contains(out, "the store holds 0 trials") {
		t.Errorf("gc with a TTL of 1ns: %d\n%s%s", code, out, errs)
	}
}
