// Package gvisor is the `gvisor` rung: each trial's command runs in a gVisor
// sandbox (runsc), whose kernel, not the host's, answers its system calls.
//
// The file delta comes from overlays dryexec owns, not from runsc's own
// overlay: a view guest (wire.RoleGVisorView) builds the same overlays and
// masks as an ns trial's view in a mount namespace of its own, and becomes
// runsc with that view as the container's root and runsc's overlay off
// (--overlay2=none), so every write of the sandbox lands in an upper dir on
// the host side. Inside gVisor the trial guest (wire.RoleGVisorTrial) runs
// the command as the ns guest does and reports how it ended; once the sandbox
// is gone the host walks the upper dirs itself and diffs them with
// fsdelta.Differ, exactly as the ns rung's host does with a guest's report.
// See docs/architecture.md, "The gvisor rung".
package gvisor
