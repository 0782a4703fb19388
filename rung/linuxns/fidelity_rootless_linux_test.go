package linuxns_test

import (
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/rootless"
)

// TestTrialFileFidelityRootless is TestTrialFileFidelity as an unprivileged
// caller, the rename of a host dir included (the supervisor's renamer).
func TestTrialFileFidelityRootless(t *testing.T) {
	if rootless.Active() {
		t.Skip("the rootless run itself")
	}
	rootless.Rerun(t, "^TestTrialFileFidelity$", 3*time.Minute)
}
