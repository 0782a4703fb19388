package guest

import "syscall"

// runnerAttr adds to an exec's attributes what only the Python runner gets: it
// dies with the guest (on the host rung nothing else would end a runner blocked
// in a call to the host after the session is gone; on the ns rung the pid
// namespace ends it anyway).
func runnerAttr(a *syscall.SysProcAttr) *syscall.SysProcAttr {
	a.Pdeathsig = syscall.SIGKILL
	return a
}
