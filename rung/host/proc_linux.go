package host

import (
	"syscall"

	"github.com/dryexec/dryexec/rung/internal/hostproc"
	"github.com/dryexec/dryexec/rung/linuxns"
)

func guestAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// guestEnded says how guest process pid ended, as the ns rung's guests are
// told (linuxns.GuestState), waiting a moment for one whose stream just
// ended.
func guestEnded(pid int) (string, bool) { return linuxns.GuestState(pid, linuxns.GuestExitWait) }

// killSession SIGKILLs every process whose session id is sid.
func killSession(sid int) { hostproc.KillSession(sid) }
