// Command dryexec-smallfront writes the small front (internal/smallfront)
// to the path given: `make build` installs it as bin/dryexec on
// linux/amd64. It exits 3 where the small front is not built, so that the
// Makefile installs the Go front as bin/dryexec there instead.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/dryexec/dryexec/internal/smallfront"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: dryexec-smallfront PATH")
		os.Exit(2)
	}
	if err := smallfront.Install(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "dryexec-smallfront:", err)
		if errors.Is(err, smallfront.ErrUnsupported) {
			os.Exit(3)
		}
		os.Exit(1)
	}
}
