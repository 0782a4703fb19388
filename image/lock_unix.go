//go:build unix

package image

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// flock opens (creating) p and takes a flock on it: exclusive or shared,
// waiting until ctx ends. The lock goes with the file's close or the death of
// the process, so a crashed pull never leaves one behind.
func flock(ctx context.Context, p string, exclusive bool) (*os.File, error) {
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("image: lock: %w", err)
	}
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	// Try at once; then wait in a goroutine that ctx can abandon (flock has
	// no timeout, and a cancelled pull must not hang on another's lock).
	if err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB); err == nil {
		return f, nil
	}
	done := make(chan error, 1)
	go func() { done <- unix.Flock(int(f.Fd()), how) }()
	select {
	case err := <-done:
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("image: lock %s: %w", p, err)
		}
		return f, nil
	case <-ctx.Done():
		// Closing the file releases whatever the goroutine may yet get.
		go func() { <-done; f.Close() }()
		return nil, ctx.Err()
	}
}

// tryFlock takes an exclusive lock on p if nobody holds any, else returns nil.
func tryFlock(p string) (*os.File, error) {
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("image: lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, nil
	}
	return f, nil
}
