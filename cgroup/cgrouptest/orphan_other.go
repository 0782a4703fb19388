//go:build !linux

package cgrouptest

// MaybeOrphanMain returns: sandbox groups exist on Linux only.
func MaybeOrphanMain() {}
