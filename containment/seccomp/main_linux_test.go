package seccomp

import (
	"os"
	"runtime"
	"testing"
)

// TestMain keeps the main goroutine on the main thread: a filtered goroutine
// that ended on the main thread would leave it parked, not exited, and its
// listener would never hang up.
func TestMain(m *testing.M) {
	runtime.LockOSThread()
	os.Exit(m.Run())
}
