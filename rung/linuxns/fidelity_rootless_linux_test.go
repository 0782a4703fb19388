package linuxns_test

import (
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/rootless"
)

// TestTrialFileFidelityRootless is TestTrialFileFidelity as an unprivileged
// caller: all but the rename of a host dir, which fails there with EXDEV (a
// user namespace refuses redirect_dir=on).
func TestTrialFileFidelityRootless(t *testing.T) {
	if rootless.Active() {
		t.Skip("the rootless run itself")
	}
	rootless.Rerun(t, "^TestTrialFileFidelity$", 3*time.Minute)
}
