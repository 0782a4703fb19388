package cli

import (
	"context"
	"os"
	"testing"

	"github.com/dryexec/dryexec/guest"
)

// TestMain lets the test binary be the guest (the ns rung re-executes it) and,
// with DRYEXEC_TEST_AS_CLI=1, the CLI itself, so that tests can SIGKILL a real
// dryexec process mid-commit.
func TestMain(m *testing.M) {
	guest.MaybeMain(os.Args)
	if os.Getenv("DRYEXEC_TEST_AS_CLI") == "1" {
		os.Exit(Run(context.Background(), os.Args[1:], Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}))
	}
	os.Exit(m.Run())
}
