package localrun

import (
	"os"
	"testing"

	"github.com/dryexec/dryexec/guest"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/netsim/netrole"
)

// TestMain lets this test binary serve as the guest and netsim's role: the
// ns rung re-executes /proc/self/exe for them when no dryexec-guest sits
// beside it.
func TestMain(m *testing.M) {
	guest.MaybeMain(os.Args)
	netrole.MaybeMain(os.Args)
	testreq.OwnMountNamespace()
	os.Exit(m.Run())
}
