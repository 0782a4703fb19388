package netproc

import (
	"github.com/dryexec/dryexec/internal/procfs"
)

// Children lists the processes in the role (started by Start) whose parent
// is parent, from /proc: what a test kills to show that a role's death
// ends one sandbox's network and nothing else.
func Children(parent int) []int {
	return procfs.Children(parent, func(_ string, argv []string) bool { return IsRole(argv) })
}
