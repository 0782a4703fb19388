// Package guest is the supervisor that runs inside every isolation boundary. It is
// started by re-executing the dryexec binary as `dryexec guest ROLE` (an internal
// subcommand, never to be called directly) and speaks package wire to the host
// side over an inherited file descriptor.
//
// Everything here runs on the sandbox side of the trust boundary: it may set up the
// sandbox's view before the untrusted command starts, but what it reports is
// re-checked by the host (see fsdelta.Differ).
package guest

import (
	"fmt"
	"os"
	"runtime"
)

// Roles.
const (
	// RoleNSTrial: PID 1 of a one-shot ns trial. It builds the overlay view,
	// runs the command, kills what is left, and streams the upper dirs back.
	RoleNSTrial = "ns-trial"
	// RoleStub: a trial's command process before the command is known,
	// where the native stub (guest/cmdstub) cannot run; it is replaced by
	// the command.
	RoleStub = "stub"
	// RoleHostWalk: a short-lived helper of the host's that walks a dead
	// trial's upper dirs (hostwalk_linux.go).
	RoleHostWalk = "host-walk"
	// RoleGVisorView: the gvisor rung's view builder on the host kernel,
	// which becomes runsc (gvisor_linux.go, wire.VerbGVisorExec).
	RoleGVisorView = "gvisor-view"
	// RoleGVisorTrial: the gvisor rung's supervisor inside gVisor: it runs
	// the command and reports how it ended; the host walks the upper dirs.
	RoleGVisorTrial = "gvisor-trial"
	// RoleVMInit: the vm rung's init, PID 1 of a microVM booted from the
	// initramfs dryexec builds: it loads the virtio modules, opens the
	// wire ports and starts RoleVMTrial on them (vminit_linux.go,
	// wire/vm.go).
	RoleVMInit = "vm-init"
	// RoleVMTrial: the vm rung's trial guest, started by RoleVMInit in the
	// VM as PID 1 of a pid namespace with the wire ports at the wire's
	// descriptors.
	RoleVMTrial = "vm-trial"
)

// MaybeMain runs the guest and exits if args (os.Args) ask for a guest role;
// otherwise it returns at once. Binaries that embed dryexec's rungs (the CLI, test
// binaries) call it first thing in main / TestMain, because the rungs start the
// guest by re-executing /proc/self/exe.
func MaybeMain(args []string) {
	if len(args) < 3 || args[1] != "guest" {
		return
	}
	os.Exit(Main(args[2:]))
}

// Main runs the guest role named by args[0] and returns the exit code.
func Main(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "dryexec guest: internal subcommand, not to be called directly")
		return 2
	}
	if args[0] == RoleStub {
		// Before anything else: the stub holds nothing of the guest's, and
		// it must stay traceable (it becomes the command).
		return runStub(args[1:])
	}
	// The guest holds descriptors of what the sandbox must not reach (the
	// scratch tmpfs with the upper dirs); not dumpable means a process of the
	// sandbox, even one running as the same uid, cannot ptrace it or open its
	// /proc/PID/fd entries.
	setNotDumpable()
	// The main goroutine keeps the main thread: a confined launcher thread
	// (confine_linux.go) must be able to exit when its goroutine ends, and the
	// Go runtime parks the main thread instead of ending it.
	runtime.LockOSThread()
	if err := closeInheritedOnExec(); err != nil {
		fmt.Fprintf(os.Stderr, "dryexec guest: %v\n", err)
		return 1
	}
	switch args[0] {
	case RoleNSTrial:
		return runNSTrial()
	case RoleSession:
		return runSession()
	case RoleHostWalk:
		return runHostWalk(args[1:])
	case RoleGVisorView:
		return runGVisorView()
	case RoleGVisorTrial:
		return runGVisorTrial()
	case RoleVMInit:
		return runVMInit()
	case RoleVMTrial:
		return runVMTrial()
	}
	fmt.Fprintf(os.Stderr, "dryexec guest: unknown role %q\n", args[0])
	return 2
}
