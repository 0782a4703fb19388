package linuxns

import (
	"os"
	"testing"

	"github.com/dryexec/dryexec/guest"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/netsim/netrole"
	"github.com/dryexec/dryexec/wire"
	"go.uber.org/goleak"
)

// TestMain lets this test binary serve as the guest: the rung re-executes
// /proc/self/exe as `dryexec guest ns-trial`.
//
// With hostileGuestEnv set it plays a guest that breaks the protocol
// instead (TestHostileGuest).
func TestMain(m *testing.M) {
	if script := os.Getenv(hostileGuestEnv); script != "" && len(os.Args) > 2 && os.Args[1] == "guest" && os.Args[2] == wire.RoleNSTrial {
		os.Exit(hostileGuest(script))
	}
	guest.MaybeMain(os.Args)
	netrole.MaybeMain(os.Args)
	testreq.OwnMountNamespace()
	// Every goroutine a test started must be gone when the tests end.
	goleak.VerifyTestMain(m)
}
