package dryexec_test

import (
	"os/exec"
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
	}
	for _, c := range cases {
		t.Run(strings.TrimPrefix(c.pkg, "./"), func(t *testing.T) {
			out, err := exec.Command("go", "list", "-deps", c.pkg).Output()
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
