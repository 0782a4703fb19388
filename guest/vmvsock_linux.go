package guest

import (
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/wire"
)

// vmWireOnVsock says whether the kernel's command line (cmdline,
// /proc/cmdline's text) has the host's wire.VMVsockParam: the VM's VMM
// has no virtio-serial (Firecracker) and the streams come over vsock.
func vmWireOnVsock(cmdline string) bool {
	return strings.Contains(" "+strings.TrimSpace(cmdline)+" ", " "+wire.VMVsockParam+" ")
}

// openVMWire opens the wire's streams on the transport the host chose on
// the kernel's command line: virtio-serial ports (openVMPorts), or vsock
// (openVsockPorts).
func openVMWire(vsock bool, wait time.Duration) ([]*os.File, error) {
	if vsock {
		return openVsockPorts(wait)
	}
	return openVMPorts(wait)
}

// openVsockPorts listens on vsock port wire.VMVsockPortBase+i for each
// stream i of wire.VMPorts and takes the first connection on each: the
// host connects once the VM runs (Firecracker's host-initiated direction)
// and retries while nothing listens yet. Every listener is made before
// any accept, so the host's connections, made in order, wait in the
// backlog. A stream is a connected socket: the host's half-close is the
// end of stdin or of the stub's request, as virtio-serial's host close
// is. The listeners are closed once each has its connection: no one else
// can reach a port. wait bounds the whole (the vsock transport's module
// may still be probing the device when init starts, and the host may be
// slow to connect).
func openVsockPorts(wait time.Duration) ([]*os.File, error) {
	deadline := time.Now().Add(wait)
	n := len(wire.VMPorts())
	lns := make([]int, 0, n)
	defer func() {
		for _, fd := range lns {
			unix.Close(fd)
		}
	}()
	for i := range n {
		fd, err := vsockListen(uint32(wire.VMVsockPortBase+i), deadline)
		if err != nil {
			return nil, fmt.Errorf("listening on vsock port %d (%s): %w", wire.VMVsockPortBase+i, wire.VMPorts()[i], err)
		}
		lns = append(lns, fd)
	}
	files := make([]*os.File, 0, n)
	for i, ln := range lns {
		fd, err := vsockAccept(ln, deadline)
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, fmt.Errorf("no host connection on vsock port %d (%s) within %v: %w", wire.VMVsockPortBase+i, wire.VMPorts()[i], wait, err)
		}
		// The init resets the VM as soon as the trial guest ends: with
		// lingering, the last close of a stream (the init's, before the
		// reset) waits, up to vsockLinger, until the host has the
		// stream's end, so that the guest's last frames (trial.exit,
		// trial.done) are not lost in the transport's queue. Best
		// effort: without it the close does not wait.
		unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: vsockLinger})
		files = append(files, os.NewFile(uintptr(fd), wire.VMPorts()[i]))
	}
	// The streams are connected: no one needs the device node again (a
	// socket is made with socket(2), which the command's seccomp profile
	// refuses for AF_VSOCK), and a command that can see /dev has one node
	// fewer to open.
	os.Remove("/dev/vsock")
	return files, nil
}

// vsockLinger bounds, in seconds, how long closing a vsock stream waits
// for the host to have all of it.
const vsockLinger = 5

// vsockListen listens on port of any CID. Until the transport's driver
// has probed the device, the socket family has no transport and bind
// fails (ENODEV, EADDRNOTAVAIL): retried until deadline, as openVMPorts
// looks for its ports.
func vsockListen(port uint32, deadline time.Time) (int, error) {
	for {
		fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			err = unix.Bind(fd, &unix.SockaddrVM{CID: unix.VMADDR_CID_ANY, Port: port})
			if err == nil {
				if err = unix.Listen(fd, 1); err == nil {
					return fd, nil
				}
			}
			unix.Close(fd)
		}
		if time.Now().After(deadline) {
			return -1, err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// vsockAccept takes ln's first connection, within deadline (poll: an
// accept blocked past it could not be cut short otherwise).
func vsockAccept(ln int, deadline time.Time) (int, error) {
	ms := max(int(time.Until(deadline)/time.Millisecond), 0)
	for {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(ln), Events: unix.POLLIN}}, ms)
		if err == unix.EINTR {
			ms = max(int(time.Until(deadline)/time.Millisecond), 0)
			continue
		}
		if err != nil {
			return -1, err
		}
		if n == 0 {
			return -1, unix.ETIMEDOUT
		}
		fd, _, err := unix.Accept4(ln, unix.SOCK_CLOEXEC)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		return fd, err
	}
}
