//go:build !dryexec_testhooks

package linuxns

// testHooks is empty in a release build: no test can delay or watch a trial
// from inside (hooks_testhooks_linux.go has the tests' version).
type testHooks struct{}

func (*testHooks) beforeAttach() {}

func (*testHooks) started(int) {}

func (*testHooks) runAfterExit() bool { return false }
