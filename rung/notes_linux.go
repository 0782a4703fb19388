package rung

import (
	"errors"

	"github.com/dryexec/dryexec/cgroup"
)

// notes are what doctor says about how a rung that has no Notes of its own
// contains its sandboxes beyond "available": for ns, how its limits are
// enforced here.
func notes(name string) []string {
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
