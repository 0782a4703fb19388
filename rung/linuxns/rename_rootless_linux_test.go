package linuxns_test

import (
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/rootless"
)

// TestTrialDirRenameRootless runs the dir-rename tests as an unprivileged
// caller, where the supervisor's renamer does what redirect_dir=on does as
// root.
func TestTrialDirRenameRootless(t *testing.T) {
	if rootless.Active() {
		t.Skip("the rootless run itself")
	}
	rootless.Rerun(t, "^TestTrialDirRename", 5*time.Minute)
}

// TestRenamedDirHoldingMaskRootless: the same as an unprivileged caller (the
// supervisor's renamer refuses a tree holding a mount).
func TestRenamedDirHoldingMaskRootless(t *testing.T) {
	if rootless.Active() {
		t.Skip("the rootless run itself")
	}
	rootless.Rerun(t, "^TestRenamedDirHoldingMaskLeaksNothing$", 2*time.Minute)
}

// TestTrialHostLinkRootless runs the hard-link tests as an unprivileged
// caller, where the supervisor's link worker gives a host file and its new
// link one identity.
func TestTrialHostLinkRootless(t *testing.T) {
	if rootless.Active() {
		t.Skip("the rootless run itself")
	}
	rootless.Rerun(t, "^TestTrial(HostLink|LinkEscapes|GitCloneLocal)$", 5*time.Minute)
}
