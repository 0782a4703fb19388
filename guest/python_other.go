//go:build unix && !linux

package guest

import "syscall"

// runnerAttr: no parent-death signal outside Linux.
func runnerAttr(a *syscall.SysProcAttr) *syscall.SysProcAttr { return a }
