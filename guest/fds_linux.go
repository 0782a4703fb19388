package guest

import "golang.org/x/sys/unix"

// closeInheritedOnExec marks every descriptor from 3 up close-on-exec. The guest
// inherits its control socket and output pipes without that flag (they crossed
// an exec), and Go only sets it on descriptors it opens itself: without this,
// every command the guest starts would inherit a live channel to the host and
// could forge what the guest reports. Descriptors a command must get are passed
// explicitly (ProcAttr.Files, exec.Cmd.ExtraFiles), which clears the flag on
// the copies.
func closeInheritedOnExec() error {
	return unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
}
