package guest

import (
	"fmt"
	"os/exec"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/wire"
)

// startVM prepares a session inside the vm rung's microVM. vm-init started
// this guest as PID 1 of a pid and mount namespace of the VM's, with the
// wire's ports at its descriptors (RoleSession instead of RoleVMTrial):
// it mounts the view the host exports over 9p as its root, as the trial
// guest does (enterVMRoot: writes outside the workspace land in the view's
// upper dirs on the host), brings up lo, and then keeps the workspace as
// the gvisor session guest does (startGVisor): a tmpfs of the VM's own with
// its baseline beside it, scan staging, the signals a command could end
// PID 1 with handled. A decision, as on gvisor: an overlay staging here
// would need its layers hidden from the command as ns hides them, and
// scan staging already passes the corpus on every rung that uses it.
func (s *session) startVM() error {
	if err := setWallClock(s.cfg.WallNS); err != nil {
		return err
	}
	// The initramfs's root, where the guest waits while parked
	// (vmpark_linux.go).
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	// On an image (the host's image drive), netsim's files are bound by
	// this guest over the VM's own root; the host sent them for that.
	net := &wire.TrialStart{Net: s.cfg.TrustPath != "", TrustBundle: s.cfg.TrustBundle, TrustPath: s.cfg.TrustPath}
	img, err := enterVMRoot(net, 0)
	if err != nil {
		unix.Close(root)
		return err
	}
	if err := loopbackUp(); err != nil {
		unix.Close(root)
		return err
	}
	if err := s.startGVisor(); err != nil {
		unix.Close(root)
		return err
	}
	// The VM's OOM kills are counted per exec (takeOOMKills), and the
	// guest kept out of them: the execs it starts get their score back
	// (unprotectExec).
	oom := newVMOOM()
	oom.protect()
	s.vm = &vmPark{initRoot: root, oom: oom, image: img != nil, vsock: onVsock(wire.CtrlFD)}
	s.vm.alive = s.vmHeartbeat()
	return nil
}

// vmHeartbeat starts the session's heartbeat (vmHeartbeat): from session
// start until it parks, and again once unparked, a vm session guest says it
// is alive, calls in flight or not, so that the host can tell an exec
// without a timeout from a VM that stopped answering.
func (s *session) vmHeartbeat() (stop func()) {
	return vmHeartbeat(func() error { return s.peer.Notify(wire.VerbVMAlive, nil) })
}

// unprotectExec gives a vm session's exec the OOM score the guest took
// from itself (unprotect); elsewhere it does nothing.
func (s *session) unprotectExec(cmd *exec.Cmd) error {
	if s.vm == nil || s.vm.oom == nil {
		return nil
	}
	if err := unprotect(cmd.Process.Pid); err != nil {
		return fmt.Errorf("giving the exec its OOM score: %w", err)
	}
	return nil
}

// takeOOMKills is how many processes the VM's kernel OOM-killed since the
// last call (vm sessions; 0 elsewhere): the host turns them into a limit
// violation naming the VM's RAM.
func (s *session) takeOOMKills() int64 {
	if s.vm == nil || s.vm.oom == nil {
		return 0
	}
	return s.vm.oom.kills()
}

// ownKernel says whether the session runs on a kernel of the sandbox's own
// (gvisor's sentry, the vm rung's VM): its processes are not the host's,
// so each exec gets the pids limit as its RLIMIT_NPROC (startGVisorExec).
func (s *session) ownKernel() bool { return s.cfg.Rung == "gvisor" || s.cfg.Rung == "vm" }
