package netproc

import (
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// escapeExe is the name under which the test binary, started in the role,
// tries to break out of its confinement instead of serving (TestEscape).
const escapeExe = "netproc-escape"

// TestMain lets this test binary serve as the role (Start re-executes it).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == Role && filepath.Base(os.Args[0]) == escapeExe {
		os.Exit(role(attempts))
	}
	MaybeMain(os.Args)
	goleak.VerifyTestMain(m)
}
