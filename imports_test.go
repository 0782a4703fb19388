package dryexec_test

import (
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestImportBoundaries keeps the trust boundary and the light packages
// light, as go-containerregistry guards what its binaries link: each
// package's whole dependency graph (go list -deps, tests excluded) must
// hold none of its forbidden packages. A forbidden entry ending in "/"
// forbids every package below it.
func TestImportBoundaries(t *testing.T) {
	cases := []struct {
		pkg    string
		forbid []string
		why    string
	}{
		{".", []string{"net/http", "github.com/dryexec/dryexec/netsim", "gvisor.dev/"},
			"the contract's types are read by every client and by the guest"},
		{"./cmd/dryexec-guest", []string{"net/http", "github.com/dryexec/dryexec/netsim", "gvisor.dev/",
			"github.com/dryexec/dryexec/store", "github.com/dryexec/dryexec/server",
			"github.com/dryexec/dryexec/fsdelta", "github.com/aymanbagabas/go-udiff",
			"github.com/dryexec/dryexec/image", "github.com/google/go-containerregistry/"},
			"the guest supervisor runs inside every sandbox: the less it links, the less an attacker there can reach"},
		{"./render", []string{"github.com/dryexec/dryexec/netsim", "gvisor.dev/"},
			"rendering a stored delta needs no network stack"},
		{"./cmd/dryexec", []string{"github.com/dryexec/dryexec/netsim/mock/openapi", "github.com/getkin/kin-openapi/",
			"github.com/santhosh-tekuri/jsonschema/"},
			"the OpenAPI mocks' libraries initialise for milliseconds at every start; only dryexec-netsim-openapi serves them"},
		{"./cmd/dryexec-netsim", []string{"github.com/dryexec/dryexec/netsim/mock/openapi", "github.com/getkin/kin-openapi/",
			"github.com/santhosh-tekuri/jsonschema/"},
			"every trial's network role starts it: the OpenAPI mocks are dryexec-netsim-openapi's, for the mock files that name one"},
		{"-tags=dryexec_nocel ./cmd/dryexec-local", []string{"cel.dev/", "google.golang.org/protobuf/", "github.com/spf13/cobra",
			"github.com/modelcontextprotocol/", "github.com/google/go-containerregistry/", "github.com/dryexec/dryexec/internal/cli",
			"github.com/dryexec/dryexec/server", "github.com/dryexec/dryexec/mcpserver", "github.com/dryexec/dryexec/agent",
			"github.com/dryexec/dryexec/image", "github.com/dryexec/dryexec/rung/gvisor", "github.com/dryexec/dryexec/rung/vm",
			"github.com/dryexec/dryexec/rung/host", "github.com/dryexec/dryexec/netsim/mock/openapi",
			"github.com/dryexec/dryexec/netsim", "github.com/dryexec/dryexec/netsim/netrole", "gvisor.dev/"},
			"a trial without a daemon starts it, as make build builds it: what it links initialises before main (docs/architecture.md, \"The front and the engine\")"},
	}
	for _, c := range cases {
		t.Run(strings.TrimPrefix(c.pkg, "./"), func(t *testing.T) {
			out, err := exec.Command("go", append([]string{"list", "-deps"}, strings.Fields(c.pkg)...)...).Output()
			if err != nil {
				t.Fatalf("go list -deps %s: %v", c.pkg, err)
			}
			deps := strings.Fields(string(out))
			if len(deps) < 2 {
				t.Fatalf("go list -deps %s listed %d packages: the check would pass on nothing", c.pkg, len(deps))
			}
			for _, d := range deps {
				for _, f := range c.forbid {
					if d == f || (strings.HasSuffix(f, "/") && strings.HasPrefix(d, f)) {
						t.Errorf("%s depends on %s (%s)", c.pkg, d, c.why)
					}
				}
			}
		})
	}
}

// guestPkg is the supervisor that runs inside the sandbox.
const guestPkg = "github.com/dryexec/dryexec/guest"

// guestImportAllowed are the non-test packages, besides the main packages
// under cmd/ and bench/cmd/, that may import guestPkg, each with why.
var guestImportAllowed = map[string]string{
	"github.com/dryexec/dryexec/test/soak/harness": "its Main is the soak tests' TestMain: the test binary re-executes itself as the guest",
}

// TestOnlyMainsImportGuest keeps the trust boundary a package boundary:
// the host side speaks to the guest through package wire and finds its
// binary through internal/guestexe, so no host package links the code that
// runs inside the sandbox. Only binaries (cmd/*, bench/cmd/*), which call
// guest.MaybeMain first thing, test mains (_test.go files are not listed
// here) and the exceptions above import it. (go-containerregistry guards
// what its binaries link the same way, with go list.)
func TestOnlyMainsImportGuest(t *testing.T) {
	for _, c := range []struct{ name, goos, tags string }{
		{"linux", "linux", ""}, {"darwin", "darwin", ""}, {"testhooks", "linux", "dryexec_testhooks"},
	} {
		t.Run(c.name, func(t *testing.T) {
			importers := guestImporters(t, c.goos, c.tags)
			if !importers["github.com/dryexec/dryexec/cmd/dryexec-guest"] {
				t.Fatalf("cmd/dryexec-guest is not among guest's importers %v: the check would pass on nothing", importers)
			}
			for _, p := range slices.Sorted(maps.Keys(importers)) {
				isMain := importers[p]
				rel := strings.TrimPrefix(p, "github.com/dryexec/dryexec/")
				if isMain && (strings.HasPrefix(rel, "cmd/") || strings.HasPrefix(rel, "bench/cmd/")) {
					continue
				}
				if _, ok := guestImportAllowed[p]; !ok {
					t.Errorf("%s imports %s: host code reaches the guest through package wire and internal/guestexe only", rel, guestPkg)
				}
			}
		})
	}
}

// guestImporters maps the module's packages, built for goos with tags,
// whose non-test files import guestPkg to whether each is a main package.
func guestImporters(t *testing.T, goos, tags string) map[string]bool {
	t.Helper()
	cmd := exec.Command("go", "list", "-tags", tags, "-f", "{{.Name}} {{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
	cmd.Env = append(cmd.Environ(), "GOOS="+goos, "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	importers := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[1] == guestPkg || strings.HasPrefix(f[1], guestPkg+"/") {
			continue
		}
		if slices.Contains(f[2:], guestPkg) {
			importers[f[1]] = f[0] == "main"
		}
	}
	return importers
}
