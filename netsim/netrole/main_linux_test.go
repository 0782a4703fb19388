package netrole

import (
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/dryexec/dryexec/netsim/mock/openapi"
	"github.com/dryexec/dryexec/netsim/netproc"
)

// escapeExe is the name under which the test binary, started in the role,
// tries to break out of its confinement instead of serving (TestEscape).
const escapeExe = "netproc-escape"

// syncExe is the name under which the test binary, started in the role,
// logs lateRecordCount events once ready and then answers syncs
// (TestSyncHasEveryEvent).
const syncExe = "netproc-sync"

// openAPIExe is the name under which the test binary, started in the role,
// serves OpenAPI mocks as dryexec-netsim does (TestOpenAPIOnlyWhereLinked).
const openAPIExe = "netproc-openapi"

// TestMain lets this test binary serve as the role (Start re-executes it).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == netproc.Role && filepath.Base(os.Args[0]) == escapeExe {
		os.Exit(role(nil, attempts))
	}
	if len(os.Args) > 1 && os.Args[1] == netproc.Role && filepath.Base(os.Args[0]) == syncExe {
		os.Exit(role(nil, lateRecords))
	}
	if filepath.Base(os.Args[0]) == openAPIExe {
		MaybeMainOpenAPI(os.Args, openapi.Load)
	}
	MaybeMain(os.Args)
	goleak.VerifyTestMain(m)
}
