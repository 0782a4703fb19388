package main

import (
	"context"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/localrun"
	"github.com/dryexec/dryexec/netsim/netproc"
	"github.com/dryexec/dryexec/rung/linuxns"
)

// opener is openNS: this binary runs its trials here, when a role binary
// for their networks is installed (netproc.Installed). Without one it is
// nil, and every invocation goes to the engine: this binary does not link
// the role the rung would otherwise re-execute it as (main's comment).
func opener() localrun.Opener {
	if _, ok := netproc.Installed(); !ok {
		return nil
	}
	return openNS
}

// openNS opens the ns rung as the registry's rung.Open does (its "ns" line in
// build_linux.go, then Available), without linking the registry's other
// rungs: the only rung this binary runs.
func openNS(ctx context.Context, _ string) (dryexec.Rung, error) {
	r := &linuxns.Rung{}
	if err := r.Available(ctx); err != nil {
		return nil, err
	}
	return r, nil
}
