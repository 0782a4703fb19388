//go:build !linux

package netrole

import "github.com/dryexec/dryexec/netsim/mock"

// MaybeMain returns: the role exists on Linux only (elsewhere no rung serves
// a TUN device).
func MaybeMain(args []string) {}

// MaybeMainOpenAPI returns, as MaybeMain does.
func MaybeMainOpenAPI(args []string, load mock.LoadAPI) {}
