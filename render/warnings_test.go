package render

import (
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
)

// TestWarningsAreShown: a limit that could not be enforced is said in the
// human summary too, one line per warning, with control bytes neutralised.
func TestWarningsAreShown(t *testing.T) {
	d := &dryexec.StateDelta{TrialID: "tr_w", Rung: "ns", Action: dryexec.Action{Argv: []string{"true"}},
		Warnings: []string{"cgroup limits unavailable: limits fall back to rlimits", "bad\x1b[2Jbyte"}}
	d.Normalize()
	var b strings.Builder
	if err := Summary(&b, d, Options{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.Contains(out, "warning: cgroup limits unavailable: limits fall back to rlimits\n") {
		t.Errorf("no warning line in:\n%s", out)
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("an escape byte reached the terminal:\n%q", out)
	}
}

// TestHostSaysNoIsolation: a host trial's summary says "no isolation" in
// its first line, whatever its warnings say.
func TestHostSaysNoIsolation(t *testing.T) {
	tests := []struct {
		rung string
		want bool
	}{{"host", true}, {"ns", false}}
	for _, tc := range tests {
		d := &dryexec.StateDelta{TrialID: "tr_h", Rung: tc.rung, Action: dryexec.Action{Argv: []string{"true"}}}
		d.Normalize()
		var b strings.Builder
		if err := Summary(&b, d, Options{}); err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(b.String(), "\n")
		if got := strings.Contains(first, "no isolation"); got != tc.want {
			t.Errorf("%s: first line %q, want no isolation %v", tc.rung, first, tc.want)
		}
	}
}
