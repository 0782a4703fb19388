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

	"github.com/dryexec/dryexec/wire"
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
	if args[0] == wire.RoleStub {
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
	case wire.RoleNSTrial:
		return runNSTrial()
	case wire.RoleSession:
		return runSession()
	case wire.RoleHostWalk:
		return runHostWalk(args[1:])
	case wire.RoleGVisorView:
		return runGVisorView()
	case wire.RoleGVisorTrial:
		return runGVisorTrial()
	case wire.RolePIDInit:
		return runPIDInit(args[1:])
	case wire.RoleVMInit:
		return runVMInit(args[1:])
	case wire.RoleVMTrial:
		return runVMTrial()
	case wire.RoleImageView:
		return runImageView(args[1:])
	}
	fmt.Fprintf(os.Stderr, "dryexec guest: unknown role %q\n", args[0])
	return 2
}
