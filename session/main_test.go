package session

import (
	"os"
	"testing"

	"github.com/dryexec/dryexec/guest"
	"github.com/dryexec/dryexec/netsim/netrole"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	guest.MaybeMain(os.Args)
	netrole.MaybeMain(os.Args)
	// Every goroutine a test started must be gone when the tests end.
	goleak.VerifyTestMain(m)
}
