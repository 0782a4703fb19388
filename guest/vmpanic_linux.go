//go:build !dryexec_testhooks

package guest

// vmPanicHook is the tests' (vmpanic_testhooks_linux.go): a release build
// has none.
func vmPanicHook([]string) {}
