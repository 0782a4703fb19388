package linuxns_test

import (
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/rootless"
)

// TestSeccompRootless re-runs the seccomp, Landlock and memory tests as an unprivileged
// user: none of them depends on being root. (An external
// test package: internal/rootless imports this one.)
func TestSeccompRootless(t *testing.T) {
	if rootless.Active() {
		t.Skip("already the unprivileged run")
	}
	rootless.Rerun(t, "^(TestSeccompRefusesAndReports|TestLandlockWall|TestMemoryDelta)$", 5*time.Minute)
}
