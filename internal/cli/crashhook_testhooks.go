//go:build dryexec_testhooks

package cli

import (
	"fmt"
	"os"
)

// crashHook exists for the crash-safety tests only, and only in a build with
// the test hooks (package testhooks): DRYEXEC_TEST_CRASH_AT=N makes the
// process SIGKILL itself at commit point N, as a power cut or OOM kill would.
func crashHook(env Env) func(int) {
	v := env.Getenv("DRYEXEC_TEST_CRASH_AT")
	if v == "" {
		return nil
	}
	var at int
	fmt.Sscanf(v, "%d", &at)
	return func(point int) {
		if point == at {
			p, _ := os.FindProcess(os.Getpid())
			p.Kill()
			select {}
		}
	}
}
