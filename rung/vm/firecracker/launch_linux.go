package firecracker

import "syscall"

// sysProcAttr: the VMM dies with dryexec (no orphan VM), in a process
// group of its own (a terminal's ^C reaches dryexec, which ends the VM in
// order).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
