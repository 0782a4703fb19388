package wire

// Roles: the guest binary's first argument after "guest" (`dryexec guest
// ROLE`), and Hello.Role, with which a guest names what it was started as.
// The host starts a role and checks that the guest greets it as that role.
const (
	// RoleNSTrial: PID 1 of a one-shot ns trial. It builds the overlay view,
	// runs the command, kills what is left, and streams the upper dirs back.
	RoleNSTrial = "ns-trial"
	// RoleSession is a long-lived supervisor: one sandbox, many execs, a diff
	// of the workspace at any time.
	RoleSession = "session"
	// RoleStub: a trial's command process before the command is known,
	// where the native stub (guest/cmdstub) cannot run; it is replaced by
	// the command.
	RoleStub = "stub"
	// RoleHostWalk: a short-lived helper of the host's that walks a dead
	// trial's upper dirs (guest/hostwalk_linux.go).
	RoleHostWalk = "host-walk"
	// RoleGVisorView: the gvisor rung's view builder on the host kernel,
	// which becomes runsc (guest/gvisor_linux.go, VerbGVisorExec).
	RoleGVisorView = "gvisor-view"
	// RoleGVisorTrial: the gvisor rung's supervisor inside gVisor: it runs
	// the command and reports how it ended; the host walks the upper dirs.
	RoleGVisorTrial = "gvisor-trial"
	// RolePIDInit: PID 1 of the pid namespace the gvisor rung's command (or
	// a session's execs) runs in inside gVisor: it reaps orphans until the
	// guest closes its fd 3 (guest/gvisorpidns_linux.go).
	RolePIDInit = "pid-init"
	// RoleVMInit: the vm rung's init, PID 1 of a microVM booted from the
	// initramfs dryexec builds: it loads the virtio modules, opens the
	// wire ports and starts RoleVMTrial on them (guest/vminit_linux.go,
	// vm.go).
	RoleVMInit = "vm-init"
	// RoleVMTrial: the vm rung's trial guest, started by RoleVMInit in the
	// VM as PID 1 of a pid namespace with the wire ports at the wire's
	// descriptors. A session's VM has its init start RoleSession there
	// instead (init's argv: "guest vm-init session").
	RoleVMTrial = "vm-trial"
	// RoleImageView: a short-lived helper of a host that is not root, in a
	// user and mount namespace of its own: it mounts an image's read-only
	// merged view and hands the mount's descriptor back
	// (imagemount.SendView, linuxns.ImageView).
	RoleImageView = "image-view"
)

// MaskAtime is the atime (and mtime) every mask entry starts with
// (1970-01-01T00:00:01Z): the guest sets it on the masks' tmpfs, which is
// mounted strictatime, and the host (rung/linuxns) reads a mask entry whose
// atime moved as an attempt to read it.
const MaskAtime = 1
