//go:build !linux

package netproc

// MaybeMain returns: the role exists on Linux only (elsewhere no rung serves
// a TUN device).
func MaybeMain(args []string) {}
