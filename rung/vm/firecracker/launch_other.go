//go:build !linux

package firecracker

import "syscall"

// sysProcAttr: Firecracker runs on Linux only; elsewhere the process is
// whatever stands in for it (tests), in a process group of its own.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
