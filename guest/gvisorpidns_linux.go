package guest

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/internal/guestexe"
	"github.com/dryexec/dryexec/wire"
)

// A commandPIDNS is the pid namespace a gvisor trial's command, or every
// exec of a gvisor session, runs in: a child of the guest's. The guest is
// PID 1 of the sandbox, and gVisor (unlike Linux) delivers SIGKILL and
// SIGSTOP to its init from inside its own namespace: a filter can refuse
// pid 1 by number but not the guest's other thread ids, which name the whole
// guest too (kill(TID, SIGKILL)), nor a pidfd made from a /proc/1 directory.
// In a namespace of its own the command can name none of the guest's
// threads: kill and pidfd_open resolve numbers in the caller's namespace,
// and a pidfd of a process outside it is refused.
//
// Its init is the guest binary as wire.RolePIDInit (runPIDInit): it reaps
// the orphans of the command, so the command itself is never an init. The
// guest makes the namespace on a locked thread (unshare(CLONE_NEWPID)
// applies to that thread's children): the init is its first child, and
// every process the thread starts afterwards (the trial's stub, a session's
// execs) is the guest's child inside the namespace, which the guest waits
// for, times out and kills as before (it sees the namespace's processes).
type commandPIDNS struct {
	init int      // the init's pid, in the guest's namespace
	hold *os.File // the init exits at EOF on its end: close to end the namespace
}

// newCommandPIDNS makes the calling thread's children start in a new pid
// namespace and starts its init. The thread must be locked, never given
// back to the runtime, and not yet under the command's seccomp filter,
// which refuses unshare of a pid namespace.
func newCommandPIDNS() (*commandPIDNS, error) {
	if err := unix.Unshare(unix.CLONE_NEWPID); err != nil {
		return nil, fmt.Errorf("a pid namespace for the command: %w", err)
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, err
	}
	r, w := os.NewFile(uintptr(p[0]), "pidns-hold"), os.NewFile(uintptr(p[1]), "pidns-hold")
	defer r.Close()
	devnull, err := os.OpenFile("/dev/null", os.O_RDWR, 0)
	if err != nil {
		w.Close()
		return nil, err
	}
	defer devnull.Close()
	pid, err := syscall.ForkExec(guestexe.Self(), []string{"dryexec", "guest", wire.RolePIDInit}, &syscall.ProcAttr{
		Env:   []string{},
		Files: []uintptr{devnull.Fd(), devnull.Fd(), devnull.Fd(), r.Fd()},
	})
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("starting the command's pid namespace init: %w", err)
	}
	return &commandPIDNS{init: pid, hold: w}, nil
}

// close ends the namespace: its init exits, and the kernel kills every
// process left in it.
func (n *commandPIDNS) close() {
	if n != nil && n.hold != nil {
		n.hold.Close()
		n.hold = nil
	}
}

// runPIDInit is wire.RolePIDInit, PID 1 of a commandPIDNS: it reaps
// whatever is reparented to it until the guest closes fd 3, then exits,
// which ends every process of the namespace. It ignores every signal it can
// (PID 1 gets from its namespace only those it handles, and the Go runtime
// would handle them all); SIGCHLD only wakes it.
func runPIDInit() int {
	signal.Ignore(guestIgnored...)
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, unix.SIGCHLD)
	go func() {
		io.Copy(io.Discard, os.NewFile(3, "pidns-hold"))
		os.Exit(0)
	}()
	for {
		// A SIGCHLD during the loop stays in chld: no exit is missed.
		for {
			pid, err := unix.Wait4(-1, nil, unix.WNOHANG|unix.WALL, nil)
			if err == unix.EINTR {
				continue
			}
			if pid <= 0 || err != nil {
				break
			}
		}
		<-chld
	}
}
