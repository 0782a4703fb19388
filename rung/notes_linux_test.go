package rung

import (
	"context"
	"os"
	"strings"
	"testing"
)

// TestDoctorSaysHowLimitsAreEnforced: doctor's ns line names the cgroup
// version and the defaults as root, and the fallback rootless.
func TestDoctorSaysHowLimitsAreEnforced(t *testing.T) {
	for _, s := range Doctor(context.Background()) {
		if s.Name != "ns" || !s.Available {
			continue
		}
		if len(s.Notes) != 1 || !strings.HasPrefix(s.Notes[0], "limits: ") {
			t.Fatalf("notes %q", s.Notes)
		}
		want := "cgroup-v"
		if os.Geteuid() != 0 {
			want = "fall back to rlimits"
		}
		if !strings.Contains(s.Notes[0], want) {
			t.Errorf("note %q lacks %q", s.Notes[0], want)
		}
		t.Log(s.Notes[0])
		return
	}
	t.Skip("no ns rung here")
}
