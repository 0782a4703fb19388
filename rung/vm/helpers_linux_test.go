package vm

import (
	"sync"
	"testing"
)

// StaticGuest is staticGuest for the external tests (package vm_test).
func StaticGuest(t testing.TB) string { return staticGuest(t) }

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
