package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/dryexec/dryexec/compare"
)

// dryexec compare of three stored trials: the text table and the JSON agree
// on what each changed, alike and differently, with each one's decision.
func TestCompareTrials(t *testing.T) {
	requireNS(t)
	dir, home := t.TempDir(), t.TempDir()
	var ids []string
	for _, script := range []string{"echo a > same; echo 1 > diff", "echo a > same; echo 2 > diff", "echo a > same; echo 3 > only"} {
		code, out, errs := cli(t, home, "run", "--json", "-C", dir, "--", "sh", "-c", script)
		if code != 0 {
			t.Fatalf("run: %d %s", code, errs)
		}
		ids = append(ids, decode(t, out).TrialID)
	}
	code, out, errs := cli(t, home, append([]string{"compare", "--json"}, ids...)...)
	if code != 0 {
		t.Fatalf("compare: %d %s", code, errs)
	}
	var r compare.Result
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	got := map[string]string{}
	for _, p := range r.Paths {
		got[strings.TrimPrefix(p.Path, dir+"/")] = p.Agreement
	}
	if want := map[string]string{"same": "alike", "diff": "partial", "only": "partial"}; len(got) != 3 || got["same"] != want["same"] || got["diff"] != want["diff"] || got["only"] != want["only"] {
		t.Errorf("agreements %v, want %v", got, want)
	}
	if len(r.Sides) != 3 || r.Sides[0].Name != ids[0] || r.Sides[0].Decision == "" {
		t.Errorf("sides %+v", r.Sides)
	}
	code, out, _ = cli(t, home, "compare", ids[0], ids[1])
	if code != 0 || !strings.Contains(out, "1 alike, 1 differ") || !strings.Contains(out, ids[1]+" (") {
		t.Errorf("compare text: %d\n%s", code, out)
	}
	if code, _, _ := cli(t, home, "compare", ids[0]); code != ExitUsage {
		t.Errorf("compare of one: exit %d, want usage", code)
	}
}
