package render

import (
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// openTTY opens the follower side of a new pseudo-terminal, or returns nil when
// the system has none to give (no /dev/ptmx in a minimal container).
func openTTY(t *testing.T) *os.File {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Logf("no pty: %v", err)
		return nil
	}
	t.Cleanup(func() { ptmx.Close() })
	fd := int(ptmx.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Logf("no pty: unlockpt: %v", err)
		return nil
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Logf("no pty: ptsname: %v", err)
		return nil
	}
	pts, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Logf("no pty: %v", err)
		return nil
	}
	t.Cleanup(func() { pts.Close() })
	return pts
}
