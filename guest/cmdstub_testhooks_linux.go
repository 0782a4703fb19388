//go:build dryexec_testhooks

package guest

// stubHooks are the tests' ways into a stub's start (package testhooks).
type stubHooks struct {
	// slowStart, when set, runs between the stub's start and its set-up: a
	// test's way of losing the race the gate is there for.
	slowStart func()
}

func (h *stubHooks) afterStart() {
	if h.slowStart != nil {
		h.slowStart()
	}
}
