package guest

import (
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/netsim/tun"
)

// lazyPair is a lazyTUN whose "device" is the read end of a pipe (poll and
// SCM_RIGHTS treat any descriptor alike), without its watcher, and the
// host's end of the hand-over socket.
func lazyPair(t *testing.T) (*lazyTUN, *os.File, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "sock")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return &lazyTUN{dev: r, sock: conn(fds[0])}, w, conn(fds[1])
}

// TestLazyTUNFlush: at trial.exit the guest hands the device over if a
// packet waits on it, even when its watcher has not woken (a command that
// sends as it exits), so that netsim logs the packet; and hands nothing
// over for a device nothing was sent on, so that no netsim starts.
func TestLazyTUNFlush(t *testing.T) {
	t.Run("packet waiting", func(t *testing.T) {
		lt, w, host := lazyPair(t)
		if _, err := w.Write([]byte("p")); err != nil {
			t.Fatal(err)
		}
		if err := lt.flush(); err != nil {
			t.Fatal(err)
		}
		if n := waiting(t, host); n == 0 {
			t.Fatal("a packet waits on the device, and flush did not hand it over")
		}
		dev, err := tun.RecvFD(host)
		if err != nil {
			t.Fatalf("no device handed over: %v", err)
		}
		defer dev.Close()
		b := make([]byte, 1)
		if n, err := dev.Read(b); n != 1 || b[0] != 'p' {
			t.Fatalf("the device handed over is not the sandbox's: %q %v", b[:n], err)
		}
		if err := lt.flush(); err != nil { // once only
			t.Fatal(err)
		}
	})
	t.Run("nothing sent", func(t *testing.T) {
		lt, _, host := lazyPair(t)
		if err := lt.flush(); err != nil {
			t.Fatal(err)
		}
		if n := waiting(t, host); n != 0 {
			t.Fatalf("%d bytes on the host's end: the device was handed over with nothing sent", n)
		}
		if lt.sent {
			t.Fatal("flush marked the device sent")
		}
	})
}

// waiting is how many bytes wait on c, without reading them.
func waiting(t *testing.T, c *net.UnixConn) int {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if cerr := rc.Control(func(fd uintptr) { n, err = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); cerr != nil {
		t.Fatal(cerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}
