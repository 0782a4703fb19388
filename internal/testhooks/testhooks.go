// Package testhooks owns the build tag that lets tests reach inside the
// product: crash points in a commit, a delayed cgroup join, a slow stub
// set-up, a callback on each guest start. Code built without the
// dryexec_testhooks tag (every release build: `make build`, `go build`,
// `go install`) has none of them, so no environment variable or input can make
// the shipped binary crash itself or slow down on purpose; `make unit` builds
// the tests with the tag. A test that needs a hook says so with
// testreq.NeedTestHooks.
package testhooks

import "errors"

// Tag is the build tag that compiles the hooks in.
const Tag = "dryexec_testhooks"

// ErrNotBuilt is why a hook is missing: the build lacked Tag.
var ErrNotBuilt = errors.New("built without -tags " + Tag + " (make unit sets it)")

// Missing reports ErrNotBuilt where the hooks are not compiled in.
func Missing() error {
	if Enabled {
		return nil
	}
	return ErrNotBuilt
}

// VMPanicEnv=1, in the environment of a vm session's exec or in a vm trial's
// argv (`env VMPanicEnv=1 cmd…`: the trial's guest does not see its
// command's environment), has the guest supervisor panic the VM's kernel as
// the command starts (sysrq c): the tests' way to a guest kernel panic mid-exec,
// which nothing inside the sandbox can cause (its /proc/sysrq-trigger is
// read-only). Only with the hooks compiled in, and only inside a dryexec VM.
const VMPanicEnv = "DRYEXEC_TESTHOOK_VM_PANIC"

// VMRootEnv=1, in a vm trial's argv, has the trial's guest supervisor —
// root of the VM, outside the command's user namespace, over the 9p view —
// do to the view what root in a VM that took the guest over could (device
// nodes, setuid root, security.* and trusted.* xattrs, a symlink to a host
// dir and a write through it, odd names) in the command's working
// directory, then create VMRootDone there. Only with the hooks compiled
// in, and only inside a dryexec VM.
const VMRootEnv = "DRYEXEC_TESTHOOK_VM_ROOT"

// VMRootDone is the file VMRootEnv's hook creates last, the command's
// marker that the hook is done.
const VMRootDone = "vm-root-done"
