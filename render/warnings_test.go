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
