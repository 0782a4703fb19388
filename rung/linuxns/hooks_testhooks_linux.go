//go:build dryexec_testhooks

package linuxns

import "time"

// testHooks are the tests' ways into a trial (package testhooks).
type testHooks struct {
	// attachDelay holds back the guest's cgroup join (a join that ends after
	// the view is built must still come before the command).
	attachDelay time.Duration
	// guestStarted, when set, gets each guest's pid as it starts (killing a
	// guest from the host side mid-trial).
	guestStarted func(pid int)
	// holdRun sends trial.run only once trial.exit has come: the guest's
	// reader has then not read it when the command ends, whatever the
	// scheduler does.
	holdRun bool
}

func (h *testHooks) runAfterExit() bool { return h.holdRun }

func (h *testHooks) beforeAttach() { time.Sleep(h.attachDelay) }

func (h *testHooks) started(pid int) {
	if h.guestStarted != nil {
		h.guestStarted(pid)
	}
}
