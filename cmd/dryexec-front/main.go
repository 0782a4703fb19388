// Command dryexec-front is the dryexec command as `make build` installs it
// (bin/dryexec): a small process that hands `dryexec run -- CMD` to a
// running daemon itself (internal/front) and execs the engine — the whole
// CLI, cmd/dryexec, installed as dryexec-engine beside it — for everything
// else, with the same arguments, environment and standard streams. A Go
// program runs the initialisation of every package it links before main,
// and the engine links CEL, netsim's network stack and OpenAPI mocks, the
// MCP SDK and the image registry client: tens of milliseconds a trial
// through the daemon has no use for. docs/architecture.md, "The front and
// the engine". A run it leaves while no daemon could answer goes to
// dryexec-local beside the engine instead, when it is there: the same trial
// without a daemon, from a binary that links only what it needs
// (cmd/dryexec-local), which itself hands the engine what it does not
// take (another flag, --via daemon).
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
	"path/filepath"
	"syscall"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/apiclient"
	"github.com/dryexec/dryexec/internal/front"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code, handled := front.Run(ctx, os.Args[1:], front.Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv, Environ: os.Environ()})
	stop()
	if handled {
		os.Exit(code)
	}
	engine, err := front.Engine(os.Getenv, os.Executable)
	if err == nil {
		if l := local(os.Args[1:], engine); l != "" {
			engine = l
		}
		// Replaces this process: the engine has its pid, signals and
		// streams, as if it had been started directly.
		err = syscall.Exec(engine, append([]string{os.Args[0]}, os.Args[1:]...), os.Environ())
		err = fmt.Errorf("starting the engine %s: %w", engine, err)
	}
	fmt.Fprintln(os.Stderr, "dryexec:", err)
	os.Exit(125)
}

// localName is the local engine's file name (runflags.LocalName, which the
// front does not import: TestFrontLinksLittle keeps pflag out of it).
const localName = "dryexec-local"

// local is the local engine beside engine (make build puts the front, the
// engine and it side by side) when args are a run, no daemon of this
// install could answer and no engine was named ($DRYEXEC_ENGINE: then
// every invocation the front leaves goes to that one); else "". The local
// engine reads the flags itself and hands what it does not take to the
// engine (cmd/dryexec-local): the front has no flag parser but its own.
// Where a daemon may answer (apiclient.Dial finds its address: the local
// engine's own test, localrun.Main), the run is the engine's whatever its
// flags, so it goes there without the local engine's start.
func local(args []string, engine string) string {
	if len(args) == 0 || args[0] != "run" || os.Getenv("DRYEXEC_ENGINE") != "" {
		return ""
	}
	home, err := dryexec.DefaultHome(os.Getenv)
	if err != nil {
		return ""
	}
	if _, err := apiclient.Dial(os.Getenv, home, nil); err == nil {
		return ""
	}
	p := filepath.Join(filepath.Dir(engine), localName)
	if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
		return ""
	}
	return p
}
