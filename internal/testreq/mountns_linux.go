package testreq

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// ownMountsEnv marks a test binary already re-executed by OwnMountNamespace.
const ownMountsEnv = "DRYEXEC_TEST_OWN_MOUNTS"

// OwnMountNamespace re-executes the test binary, when it runs as root, in a
// mount namespace of its own that still receives the host's mounts
// (propagation slave) but sends none back. A TestMain whose tests mount on
// the host (a tmpfs, a bind alias, an erofs image) calls it first thing after
// its role dispatch: go test runs packages side by side, and another
// package's sandbox built while such a mount existed saw it in its view — a
// gvisor fork then refuses, rightly, because a host mount of its parent's
// view is gone. The mounts stay real; only who sees them changes.
//
// It returns without doing anything when not root, when already re-executed,
// or when unshare(1) is missing (the tests then mount on the host as before).
func OwnMountNamespace() {
	if os.Geteuid() != 0 || os.Getenv(ownMountsEnv) != "" {
		return
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return
	}
	self, err := os.Executable()
	if err != nil {
		return
	}
	argv := append([]string{"unshare", "--mount", "--propagation", "slave", "--", self}, os.Args[1:]...)
	err = syscall.Exec(unshare, argv, append(os.Environ(), ownMountsEnv+"=1"))
	fmt.Fprintf(os.Stderr, "testreq: re-executing in a mount namespace of its own: %v\n", err)
	os.Exit(2)
}
