//go:build !dryexec_testhooks

package cli

// crashHook is nil in a release build: no crash points, whatever the
// environment says (the tests' DRYEXEC_TEST_CRASH_AT needs the testhooks tag).
func crashHook(Env) func(int) { return nil }
