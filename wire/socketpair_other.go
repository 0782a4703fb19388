//go:build !linux

package wire

import (
	"os"
	"syscall"
)

// SocketPair makes a control connection: ours, then the guest's end (to pass
// as its descriptor CtrlFD). Ours is non-blocking, so that the runtime
// poller owns it and Close interrupts a Read in progress.
func SocketPair() (host, guest *os.File, err error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		return nil, nil, err
	}
	syscall.CloseOnExec(fds[0])
	syscall.CloseOnExec(fds[1])
	if err := syscall.SetNonblock(fds[0], true); err != nil {
		syscall.Close(fds[0])
		syscall.Close(fds[1])
		return nil, nil, err
	}
	return os.NewFile(uintptr(fds[0]), "ctrl"), os.NewFile(uintptr(fds[1]), "guest-ctrl"), nil
}
