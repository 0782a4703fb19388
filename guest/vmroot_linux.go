//go:build !dryexec_testhooks

package guest

import "github.com/dryexec/dryexec/wire"

// vmRootHook is the tests' (vmroot_testhooks_linux.go): a release build
// has none.
func vmRootHook(*wire.TrialStart) {}
