package vm_test

import (
	"context"
	"os"
	"slices"
	"testing"

	"github.com/dryexec/dryexec/internal/guestexe"
	"github.com/dryexec/dryexec/internal/rungcompare"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/linuxns"
	"github.com/dryexec/dryexec/rung/vm"
)

// requireVM builds the static guest, points DRYEXEC_GUEST at it and skips
// (or, where required, fails) unless both ns and vm run here.
func requireVM(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("boots VMs")
	}
	if os.Getenv("DRYEXEC_TEST_VM") == "" {
		// A VM boot per trial: minutes under TCG. `make test-vm` runs it.
		t.Skip("set DRYEXEC_TEST_VM=1 (make test-vm) to run it")
	}
	// The initramfs has no libc, and this test binary may be dynamic.
	t.Setenv(guestexe.Env, vm.StaticGuest(t))
	testreq.Need(t, testreq.NS, (&linuxns.Rung{}).Available(context.Background()))
	testreq.Need(t, testreq.VM, (&vm.Rung{}).Available(context.Background()))
}

// TestSameDeltaAsNS runs the same commands through `dryexec run --rung ns`
// and `--rung vm` in the same directory and requires the same delta, field
// by field (timing aside): rungcompare.SameDeltaAsNS, the network's cases
// included (netsim behind the VM's virtio-net: the same log, answers and
// decision), but for the write budget's, with a timeout that leaves TCG time
// to start the command.
func TestSameDeltaAsNS(t *testing.T) {
	requireVM(t)
	cases := rungcompare.Without(rungcompare.Cases(), func(c rungcompare.Case) bool { return c.SizesDiffer })
	for i, c := range cases {
		if c.Name == "timeout" {
			cases[i].Args = slices.Clone(c.Args)
			cases[i].Args[1] = "2s"
		}
	}
	rungcompare.SameDeltaAsNS(t, vm.Name, cases)
}
