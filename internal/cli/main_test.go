package cli

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/dryexec/dryexec/cgroup/cgrouptest"
	"github.com/dryexec/dryexec/guest"
	"github.com/dryexec/dryexec/netsim/netrole"
)

// TestMain lets the test binary be the guest (the ns rung re-executes it) and,
// with DRYEXEC_TEST_AS_CLI=1, the CLI itself, so that tests can SIGKILL a real
// dryexec process mid-commit.
func TestMain(m *testing.M) {
	cgrouptest.MaybeOrphanMain()
	guest.MaybeMain(os.Args)
	netrole.MaybeMain(os.Args)
	if os.Getenv("DRYEXEC_TEST_AS_CLI") == "1" {
		// As cmd/dryexec's main: Ctrl-C and SIGTERM cancel the context.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := Run(ctx, os.Args[1:], Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv})
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}
