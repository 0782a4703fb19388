package server_test

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/dryexec/dryexec/guest"
	"github.com/dryexec/dryexec/internal/cli"
	"github.com/dryexec/dryexec/netsim/netrole"
	"go.uber.org/goleak"
)

// asCLI makes the test binary act as the dryexec binary, so that tests (and
// the Python SDK's tests) can run a real `dryexec serve` in a process of its
// own — to SIGTERM and SIGKILL it — without building anything.
const asCLI = "DRYEXEC_TEST_AS_CLI"

func TestMain(m *testing.M) {
	guest.MaybeMain(os.Args)
	netrole.MaybeMain(os.Args)
	if os.Getenv(asCLI) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := cli.Run(ctx, os.Args[1:], cli.Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv})
		stop()
		os.Exit(code)
	}
	// Every goroutine a test started must be gone when the tests end.
	goleak.VerifyTestMain(m)
}
