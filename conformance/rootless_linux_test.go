package conformance

import (
	"os"
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/rootless"
)

// TestRootless re-runs the whole corpus on the ns rung as an unprivileged user
// (uid/gid 65534, no groups, through setpriv). The corpus must pass unchanged.
func TestRootless(t *testing.T) {
	if os.Getenv(rungEnv) != "" {
		t.Skipf("%s is set: this is already a restricted run", rungEnv)
	}
	rootless.Rerun(t, "^TestConformance", 14*time.Minute, rungEnv+"=ns")
}
