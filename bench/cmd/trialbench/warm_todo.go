//go:build linux && !dryexec_pool

package main

import "fmt"

// warmGroup is skipped until linuxns.Pool is in the tree.
//
// TODO(issue 9): when rung/linuxns has NewPool (the warm pool), delete this
// file and the build tag line of warm_pool.go: the warm row is written there.
// Meanwhile `go run -tags dryexec_pool ./bench/cmd/trialbench` runs it.
func warmGroup(e *env) ([]group, error) {
	return []group{{key: "warm", title: "Warm (pooled) trial of /bin/true vs fork+exec"}},
		fmt.Errorf("%w: the warm pool (linuxns.NewPool) is not in this tree yet", errSkip)
}
