package rung

import (
	"errors"

	"github.com/dryexec/dryexec/cgroup"
	"github.com/dryexec/dryexec/rung/gvisor"
	"github.com/dryexec/dryexec/rung/vm"
)

// notes are what doctor says about how a rung contains its sandboxes beyond
// "available": for ns, how its limits are enforced here.
func notes(name string) []string {
	switch name {
	case "gvisor":
		return (&gvisor.Rung{}).Notes()
	case "vm":
		return (&vm.Rung{}).Notes()
	}
	if name != "ns" {
		return nil
	}
	how, err := cgroup.Probe(cgroup.Options{})
	switch {
	case err == nil:
		return []string{"limits: " + how}
	case errors.Is(err, cgroup.ErrUnavailable):
		return []string{"limits: " + err.Error() + "; trials fall back to rlimits (RLIMIT_NPROC per sandbox, RLIMIT_DATA per process, no CPU limit) and say so in the delta's warnings"}
	}
	return []string{"limits: probing cgroups failed: " + err.Error()}
}
