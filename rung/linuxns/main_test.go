package linuxns

import (
	"os"
	"testing"

	"github.com/dryexec/dryexec/guest"
)

// TestMain lets this test binary serve as the guest: the rung re-executes
// /proc/self/exe as `dryexec guest ns-trial`.
func TestMain(m *testing.M) {
	guest.MaybeMain(os.Args)
	os.Exit(m.Run())
}
