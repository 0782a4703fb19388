// Command dryexec-front is the dryexec command as `make build` installs it
// (bin/dryexec): a small process that hands `dryexec run -- CMD` to a
// running daemon itself (internal/front) and execs the engine — the whole
// CLI, cmd/dryexec, installed as dryexec-engine beside it — for everything
// else, with the same arguments, environment and standard streams. A Go
// program runs the initialisation of every package it links before main,
// and the engine links CEL, netsim's network stack and OpenAPI mocks, the
// MCP SDK and the image registry client: tens of milliseconds a trial
// through the daemon has no use for. docs/architecture.md, "The front and
// the engine". A run that the local engine takes (runflags.Parse: the
// flags it knows, `--` and a command) goes to dryexec-local beside it
// instead, when it is there: the same trial without a daemon, from a binary
// that links only what it needs (cmd/dryexec-local), which itself hands the
// engine what it finds it cannot do (a daemon to ask, --via daemon).
//
// The two go:debug settings spare the runtime what the front has no use
// for in a process of a few milliseconds: sizing GOMAXPROCS by the cgroup's
// CPU limit, keeping the limit's files open and re-reading them in the
// background. (The runtime still reads /proc/self/cgroup, mountinfo and the
// limit once at start, before GODEBUG applies, to count the setting as
// non-default: strace shows the reads either way.)
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

	"github.com/dryexec/dryexec/internal/front"
	"github.com/dryexec/dryexec/internal/guestexe"
	"github.com/dryexec/dryexec/internal/runflags"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code, handled := front.Run(ctx, os.Args[1:], front.Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv, Environ: os.Environ()})
	stop()
	if handled {
		os.Exit(code)
	}
	engine, err := local(os.Args[1:]), error(nil)
	if engine == "" {
		engine, err = front.Engine(os.Getenv, os.Executable)
	}
	if err == nil {
		// Replaces this process: the engine has its pid, signals and
		// streams, as if it had been started directly.
		err = syscall.Exec(engine, append([]string{os.Args[0]}, os.Args[1:]...), os.Environ())
		err = fmt.Errorf("starting the engine %s: %w", engine, err)
	}
	fmt.Fprintln(os.Stderr, "dryexec:", err)
	os.Exit(125)
}

// local is the local engine, if args are a run it takes and no engine was
// named ($DRYEXEC_ENGINE: every invocation the front leaves goes to that
// one): $DRYEXEC_LOCAL, else dryexec-local beside this front if it is
// there; else "". The parse costs microseconds: a run the local engine
// does not take goes to the engine directly, not through a second exec.
func local(args []string) string {
	if _, _, ok := runflags.Parse(args); !ok || os.Getenv("DRYEXEC_ENGINE") != "" {
		return ""
	}
	if p := guestexe.Beside(runflags.LocalEnv, runflags.LocalName); p != guestexe.Self() {
		return p
	}
	return ""
}
