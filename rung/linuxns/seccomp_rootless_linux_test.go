package linuxns_test

import (
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/rootless"
)

// TestSeccompRootless re-runs TestSeccompRefusesAndReports as an unprivileged
// user: the filter and its reports do not depend on being root. (An external
// test package: internal/rootless imports this one.)
func TestSeccompRootless(t *testing.T) {
	if rootless.Active() {
		t.Skip("already the unprivileged run")
	}
	rootless.Rerun(t, "^TestSeccompRefusesAndReports$", 5*time.Minute)
}
