//go:build !dryexec_testhooks

package guest

import (
	"testing"

	"github.com/dryexec/dryexec/internal/testreq"
)

// Without the test hooks the test that needs one skips (or fails, where
// DRYEXEC_REQUIRE names testhooks).
func setSlowStart(t *testing.T, _ *stubExe, _ func()) { testreq.NeedTestHooks(t) }
