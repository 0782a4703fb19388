package guest

import (
	"os"
	"runtime"
	"testing"
)

// TestMain keeps the main goroutine on the main thread, as Main does in the
// guest: a confined launcher goroutine that ended on the main thread would
// leave it parked, confined, instead of exiting, and its seccomp listener
// would never hang up (BenchmarkStartTrue then waited out stop's bound).
func TestMain(m *testing.M) {
	runtime.LockOSThread()
	os.Exit(m.Run())
}
