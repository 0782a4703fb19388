package wire

import (
	"os"

	"golang.org/x/sys/unix"
)

// SocketPair makes a control connection: ours, then the guest's end (to pass
// as its descriptor CtrlFD). Ours is non-blocking, so that the runtime
// poller owns it and Close interrupts a Read in progress; both are
// close-on-exec.
func SocketPair() (host, guest *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, err
	}
	return os.NewFile(uintptr(fds[0]), "ctrl"), os.NewFile(uintptr(fds[1]), "guest-ctrl"), nil
}
