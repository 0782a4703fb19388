package guest

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// runnerAttr adds to an exec's attributes what only the Python runner gets: it
// dies with the guest (on the host rung nothing else would end a runner blocked
// in a call to the host after the session is gone; on the ns rung the pid
// namespace ends it anyway).
func runnerAttr(a *syscall.SysProcAttr) *syscall.SysProcAttr {
	a.Pdeathsig = syscall.SIGKILL
	return a
}

// fionread is the ioctl that counts a pipe's unread bytes (FIONREAD).
const fionread = unix.TIOCINQ
