//go:build linux

package netrole

import "golang.org/x/sys/unix"

// archCalls are the calls of allowedCalls that only arm64 has (or names
// differently).
func archCalls() []int { return []int{unix.SYS_FSTATAT} }
