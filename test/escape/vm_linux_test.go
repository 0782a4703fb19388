package escape

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/dryexec/dryexec/internal/guestexe"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/vm"
)

// TestEscapeVM runs the escape corpus on the vm rung, under the same three
// checks as on gvisor: the host unchanged, no attempt reporting success,
// and each refusal on record (a violation, a file in the delta, a timeout,
// or the error the attempt met: the VM's kernel answers the command, and no
// seccomp supervisor on the host records its refusals).
func TestEscapeVM(t *testing.T) {
	testreq.NeedRoot(t)
	if testing.Short() {
		t.Skip("boots a VM per attempt")
	}
	if os.Getenv("DRYEXEC_TEST_VM") == "" {
		// A VM boot per trial: minutes under TCG. `make test-vm` runs it.
		t.Skip("set DRYEXEC_TEST_VM=1 (make test-vm) to run it")
	}
	// The VM's /init is the guest binary, which must be static: this test
	// binary may not be.
	exe := filepath.Join(t.TempDir(), guestexe.Name)
	build := exec.Command("go", "build", "-o", exe, "github.com/dryexec/dryexec/cmd/dryexec-guest")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the guest: %v\n%s", err, out)
	}
	r := &vm.Rung{GuestExe: exe}
	testreq.Need(t, testreq.VM, r.Available(context.Background()))
	for _, a := range attempts {
		t.Run(a.name, func(t *testing.T) {
			if a.amd64 && runtime.GOARCH != "amd64" {
				t.Skip("uses amd64 syscall numbers")
			}
			runOn(t, r, a)
		})
	}
}

// vmUnrecorded are the attempts whose refusal vm does not record yet, and
// why; (a) and (b) still hold for them.
var vmUnrecorded = map[string]string{}
