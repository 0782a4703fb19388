package mcpserver_test

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

// The test binary acts as dryexec when asked, so the stdio test runs a real
// `dryexec mcp` process.
func TestMain(m *testing.M) {
	guest.MaybeMain(os.Args)
	netrole.MaybeMain(os.Args)
	if os.Getenv("DRYEXEC_TEST_AS_CLI") == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := cli.Run(ctx, os.Args[1:], cli.Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv})
		stop()
		os.Exit(code)
	}
	// Every goroutine a test started must be gone when the tests end.
	goleak.VerifyTestMain(m)
}
