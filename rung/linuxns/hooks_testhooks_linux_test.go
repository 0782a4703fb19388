//go:build dryexec_testhooks

package linuxns

import (
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/testreq"
)

func setAttachDelay(t *testing.T, r *Rung, d time.Duration) {
	testreq.NeedTestHooks(t)
	r.hooks.attachDelay = d
}

func setGuestStarted(t *testing.T, r *Rung, f func(pid int)) {
	testreq.NeedTestHooks(t)
	r.hooks.guestStarted = f
}

func setRunAfterExit(t *testing.T, r *Rung) {
	testreq.NeedTestHooks(t)
	r.hooks.holdRun = true
}
