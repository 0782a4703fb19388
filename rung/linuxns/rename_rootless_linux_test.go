package linuxns_test

import (
	"os"
	"path/filepath"
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
	// The escape test's tree: a dir nobody owns holding root's 0644 file
	// "foreign", which nobody may read but not link (protected_hardlinks).
	tree, err := os.MkdirTemp("", "dryexec-link-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tree) })
	if err := os.WriteFile(filepath.Join(tree, "foreign"), []byte("root's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(tree, rootless.UID, rootless.UID); err != nil {
		t.Fatal(err)
	}
	rootless.Rerun(t, "^TestTrial(HostLink|LinkEscapes|GitCloneLocal)$", 5*time.Minute, "DRYEXEC_TEST_LINK_TREE="+tree)
}
