// Command dryexec-guest is the guest supervisor alone: what the rungs start
// inside every boundary (see package guest). It links nothing else, so it
// starts fast; dryexec uses it when it sits beside the dryexec binary (make
// build puts it there), and runs itself as the guest otherwise.
package main

import (
	"fmt"
	"os"

	"github.com/dryexec/dryexec/guest"
)

func main() {
	guest.MaybeMain(os.Args)
	fmt.Fprintln(os.Stderr, "dryexec-guest: internal binary of dryexec, started by it as `dryexec-guest guest ROLE`; not to be run by hand")
	os.Exit(2)
}
