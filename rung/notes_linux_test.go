package rung

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/dryexec/dryexec/internal/testreq"
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
	testreq.Need(t, testreq.NS, errors.New("Doctor lists no available ns rung"))
}
