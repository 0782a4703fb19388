package wire

// Parking a session (the vm rung): the host asks the guest to let go of
// everything the VM's state must not carry (the view mounted over 9p, whose
// mount blocks QEMU's migration), saves the VM, and later restores it and
// asks the guest to take its root again.
const (
	// VerbSessionPark: no body. The guest drops its pre-started runner and
	// unmounts the view; nothing of the sandbox runs until unpark.
	VerbSessionPark = "session.park"
	// VerbSessionUnpark: body SessionUnpark → Ping. The guest mounts the
	// view the restored VM exports and binds its workspace there again.
	VerbSessionUnpark = "session.unpark"
)

// SessionUnpark resumes a parked session guest.
type SessionUnpark struct {
	// WallNS is the host's wall clock (the VM's stood still while parked).
	WallNS int64 `json:"wall_ns,omitempty"`
	// Branch: this VM is one of n restored from a parent's saved state (a
	// fork with memory): the guest makes its baseline the workspace as it
	// is (a branch's diff is since the fork) and keeps the parent's
	// baseline as its origin (DiffOrigin).
	Branch bool `json:"branch,omitempty"`
}
