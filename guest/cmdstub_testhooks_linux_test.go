//go:build dryexec_testhooks

package guest

import (
	"testing"

	"github.com/dryexec/dryexec/internal/testreq"
)

func setSlowStart(t *testing.T, exe *stubExe, f func()) {
	testreq.NeedTestHooks(t)
	exe.hooks.slowStart = f
}
