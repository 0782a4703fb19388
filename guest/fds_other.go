//go:build !linux

package guest

import (
	"golang.org/x/sys/unix"
)

// closeInheritedOnExec marks every descriptor from 3 up close-on-exec (see the
// Linux version for why). Without close_range, each is marked in turn.
func closeInheritedOnExec() error {
	for fd := 3; fd < 1024; fd++ {
		unix.CloseOnExec(fd)
	}
	return nil
}
