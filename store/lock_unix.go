//go:build unix

package store

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// lockFile opens (creating) p and takes an exclusive flock on it, waiting if
// wait, else failing at once when another process holds it. Closing the file
// releases the lock, and so does the death of the process that holds it.
func lockFile(p string, wait bool) (*os.File, error) {
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: lock: %w", err)
	}
	how := unix.LOCK_EX
	if !wait {
		how |= unix.LOCK_NB
	}
	if err := unix.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, fmt.Errorf("store: lock %s: %w", p, err)
	}
	return f, nil
}

// lockDir takes an exclusive flock on the directory p itself, failing at
// once when another process holds it. A trial being recorded holds its
// .partial directory's this way: no lock file to create and remove.
func lockDir(p string) (*os.File, error) {
	// unix.Open and os.NewFile rather than os.OpenFile: a blocking fd is
	// not offered to the runtime's poller (os.OpenFile's four fcntl and an
	// epoll_ctl that fails for a directory).
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("store: lock: %w", &os.PathError{Op: "open", Path: p, Err: err})
	}
	f := os.NewFile(uintptr(fd), p)
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("store: lock %s: %w", p, err)
	}
	return f, nil
}
