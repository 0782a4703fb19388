package runner_test

import (
	"os"
	"testing"

	"github.com/dryexec/dryexec/guest"
	"github.com/dryexec/dryexec/netsim/netproc"
)

// TestMain lets the test binary be the guest (the ns rung re-executes it) and
// the dryexec process that dies mid-trial in the recovery tests (orphanMain).
func TestMain(m *testing.M) {
	guest.MaybeMain(os.Args)
	netproc.MaybeMain(os.Args)
	if os.Getenv(orphanEnv) != "" {
		orphanMain()
	}
	os.Exit(m.Run())
}
