package netsim

import (
	"errors"
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestTunLinkDrainsOnClose: packets already queued when Close is called are
// still handed to the reader, then Read reports closure; nothing waits for
// more. (A trial stops netsim as soon as the sandbox's last process is gone,
// while its last packets may still sit in the device's queue.) A
// SOCK_SEQPACKET pair stands in for the TUN file: it keeps packet
// boundaries and, like the TUN fd, is non-blocking and owned by the poller.
func TestTunLinkDrainsOnClose(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[1])
	want := []string{"one", "two", "three"}
	for _, p := range want {
		if _, err := unix.Write(fds[1], []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	l := &tunLink{f: os.NewFile(uintptr(fds[0]), "seqpacket"), ended: make(chan struct{})}
	l.Close()
	buf := make([]byte, 64)
	for _, w := range want {
		n, err := l.Read(buf)
		if err != nil || string(buf[:n]) != w {
			t.Fatalf("read %q, %v; want %q: the queued packets were not drained", buf[:n], err, w)
		}
	}
	if n, err := l.Read(buf); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("after the queue: read %q, %v; want closure", buf[:n], err)
	}
	select {
	case <-l.ended:
	default:
		t.Fatal("the link did not say it has ended")
	}
}
