//go:build !dryexec_testhooks

package linuxns

import (
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/testreq"
)

// Without the test hooks the tests that need them skip (or fail, where
// DRYEXEC_REQUIRE names testhooks).

func setAttachDelay(t *testing.T, _ *Rung, _ time.Duration) { testreq.NeedTestHooks(t) }

func setGuestStarted(t *testing.T, _ *Rung, _ func(pid int)) { testreq.NeedTestHooks(t) }

func setRunAfterExit(t *testing.T, _ *Rung) { testreq.NeedTestHooks(t) }
