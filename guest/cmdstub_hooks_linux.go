//go:build !dryexec_testhooks

package guest

// stubHooks is empty in a release build (cmdstub_testhooks_linux.go has the
// tests' version).
type stubHooks struct{}

func (*stubHooks) afterStart() {}
