// Command dryexec runs a command in an ephemeral trial and reports what it would
// have changed. See README.md; `dryexec guest` is an internal role, not to be
// called directly.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/dryexec/dryexec/guest"
	"github.com/dryexec/dryexec/internal/cli"
	"github.com/dryexec/dryexec/netsim/netrole"
)

func main() {
	// First thing: the rungs re-execute this binary as the guest supervisor.
	guest.MaybeMain(os.Args)
	netrole.MaybeMain(os.Args)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], cli.Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv})
	stop()
	os.Exit(code)
}
