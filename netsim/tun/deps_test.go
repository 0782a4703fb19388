package tun

import (
	"os/exec"
	"strings"
	"testing"
)

// TestGuestDoesNotImportTheNetstack: the guest imports this package inside
// the sandbox; it must stay free of the host side's dependencies.
func TestGuestDoesNotImportTheNetstack(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/dryexec/dryexec/netsim/tun").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v %s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"gvisor.dev/", "kin-openapi", "yaml", "dryexec/netsim/mock", "dryexec/netsim/ca", "net/http"} {
			if strings.Contains(dep, banned) {
				t.Errorf("netsim/tun depends on %s", dep)
			}
		}
	}
}
