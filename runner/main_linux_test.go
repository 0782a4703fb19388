package runner_test

import (
	"os"
	"testing"

	"github.com/dryexec/dryexec/cgroup/cgrouptest"
	"github.com/dryexec/dryexec/guest"
	"github.com/dryexec/dryexec/netsim/netrole"
)

// TestMain lets the test binary be the guest (the ns rung re-executes it) and
// the dryexec process that dies mid-trial in the recovery tests (cgrouptest.MaybeOrphanMain).
func TestMain(m *testing.M) {
	guest.MaybeMain(os.Args)
	netrole.MaybeMain(os.Args)
	cgrouptest.MaybeOrphanMain()
	os.Exit(m.Run())
}
