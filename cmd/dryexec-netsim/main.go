// Command dryexec-netsim is netsim's confined role process and nothing else:
// the rungs start it (package netsim/netproc) to serve one sandbox's network
// apart from the daemon or CLI. `make build` installs it beside dryexec,
// which prefers it to re-executing itself: it links netsim and the
// netstack, not the CLI, the daemon or the decision engine, so it starts
// faster. It serves no OpenAPI mock: dryexec-netsim-openapi does, for the
// sandboxes whose mock file names one, so that the role of every other trial
// does not pay for kin-openapi's initialisation. Not to be run by hand.
package main

import (
	"fmt"
	"os"

	"github.com/dryexec/dryexec/netsim/netrole"
)

func main() {
	netrole.MaybeMain(os.Args)
	fmt.Fprintln(os.Stderr, "dryexec-netsim: internal role binary, started by dryexec")
	os.Exit(2)
}
