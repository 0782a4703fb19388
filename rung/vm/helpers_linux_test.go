package vm

import "sync"

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return "building the guest: " + e.err.Error() + "\n" + e.out }

// The static guest binary, built once per test binary.
var (
	guestOnce sync.Once
	guestPath string
	guestErr  error
)
