//go:build linux

package netrole

import "golang.org/x/sys/unix"

// archCalls are the calls of allowedCalls that only amd64 has (or names
// differently).
func archCalls() []int {
	return []int{unix.SYS_NEWFSTATAT, unix.SYS_OPEN, unix.SYS_STAT, unix.SYS_LSTAT, unix.SYS_EPOLL_WAIT, unix.SYS_POLL, unix.SYS_ACCESS}
}
