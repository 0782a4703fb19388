// Command dryexec-local is the local engine: `dryexec run -- CMD` without
// a daemon, on the ns rung, in a binary that links only that (package
// localrun, the ns rung, the store, the runner, the policy without CEL).
// The front (cmd/dryexec-front, installed as dryexec) execs it instead of
// the engine (cmd/dryexec, dryexec-engine: the whole CLI) for the run
// invocations it takes (runflags.Parse), as `make build` installs the
// three side by side. It prints, exits and stores what the engine would
// for the same arguments: the steps are the engine's own, package
// localrun's. Whatever it does not take — another command or flag, a
// daemon to ask — it hands to the engine beside it by exec, with the same
// arguments, environment and standard streams. docs/architecture.md, "The
// front and the engine".
//
// A Go program runs the initialisation of every package it links before
// main: the engine's (CEL and protobuf, the MCP SDK, the image registry
// client, every rung) costs a trial without a daemon tens of
// milliseconds. `make build` builds this one with the dryexec_nocel tag:
// the built-in policy has no CEL rules, and package policy then leaves
// CEL out.
//
// It does not link netsim's role (package netsim/netrole, and with it
// gVisor's netstack), whose initialisation would be paid at every start: the role of its trials' networks is
// dryexec-netsim, beside it as `make build` installs it. Without one (no
// $DRYEXEC_NETSIM, no dryexec-netsim beside it), the rung would re-execute
// this binary as the role; instead it takes no trial (opener) and hands
// the run to the engine, which plays the role itself, so the run behaves
// as it always did, only without the fast start. Started as the role all
// the same (that binary went away during a run), it refuses, saying why:
// the trial's network then ends as a crashed role's does.
//
// The go:debug settings are the front's, for the same reason.
//
//go:debug containermaxprocs=0
//go:debug updatemaxprocs=0
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/dryexec/dryexec/guest"
	"github.com/dryexec/dryexec/internal/front"
	"github.com/dryexec/dryexec/internal/localrun"
	"github.com/dryexec/dryexec/netsim/netproc"
)

func main() {
	// First thing: without dryexec-guest beside it, the rung re-executes
	// this binary as the guest.
	guest.MaybeMain(os.Args)
	if netproc.IsRole(os.Args) {
		fmt.Fprintf(os.Stderr, "dryexec-local does not play netsim's role: install %s beside it (make build) or name one in $%s\n", netproc.ExeName, netproc.ExeEnv)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code, taken := 0, false
	if open := opener(); open != nil {
		code, taken = localrun.Main(ctx, os.Args[1:], localrun.Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}, open)
	}
	stop()
	if taken {
		os.Exit(code)
	}
	engine, err := front.Engine(os.Getenv, os.Executable)
	if err == nil {
		// Replaces this process, as the front's exec does.
		err = syscall.Exec(engine, append([]string{os.Args[0]}, os.Args[1:]...), os.Environ())
		err = fmt.Errorf("starting the engine %s: %w", engine, err)
	}
	fmt.Fprintln(os.Stderr, "dryexec:", err)
	os.Exit(125)
}
