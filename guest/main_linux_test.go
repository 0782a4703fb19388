package guest

import (
	"os"
	"runtime"
	"testing"

	"github.com/dryexec/dryexec/internal/testreq"
)

// TestMain keeps the main goroutine on the main thread, as Main does in the
// guest: a confined launcher goroutine that ended on the main thread would
// leave it parked, confined, instead of exiting, and its seccomp listener
// would never hang up (BenchmarkStartTrue then waited out stop's bound).
//
// It also plays the guest when re-executed as one (the stub role of
// TestStubProtocol).
func TestMain(m *testing.M) {
	MaybeMain(os.Args)
	testreq.OwnMountNamespace()
	runtime.LockOSThread()
	os.Exit(m.Run())
}
