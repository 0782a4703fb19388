// Command dryexec-netsim-openapi is netsim's confined role process for a
// sandbox whose mock file names OpenAPI documents, and nothing else: the
// rungs start it (package netsim/netproc) instead of dryexec-netsim for such
// a file. It alone links the OpenAPI mocks (netsim/mock/openapi): their
// libraries' initialisation would cost every other trial's role, and the CLI,
// milliseconds at each start. `make build` installs it beside dryexec. Not to
// be run by hand.
package main

import (
	"fmt"
	"os"

	"github.com/dryexec/dryexec/netsim/mock/openapi"
	"github.com/dryexec/dryexec/netsim/netrole"
)

func main() {
	netrole.MaybeMainOpenAPI(os.Args, openapi.Load)
	fmt.Fprintln(os.Stderr, "dryexec-netsim-openapi: internal role binary, started by dryexec")
	os.Exit(2)
}
