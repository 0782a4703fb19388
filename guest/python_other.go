//go:build unix && !linux

package guest

import "syscall"

// runnerAttr: no parent-death signal outside Linux.
func runnerAttr(a *syscall.SysProcAttr) *syscall.SysProcAttr { return a }

// fionread is FIONREAD (_IOR('f', 127, int) in the BSDs' sys/filio.h), which
// x/sys/unix does not name outside Linux.
const fionread = 0x4004667f
