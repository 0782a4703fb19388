package guest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/internal/guestexe"
	"github.com/dryexec/dryexec/wire"
)

// A commandPIDNS is the pid namespace a gvisor trial's command, or every
// exec of a session on the ns, gvisor and vm rungs, runs in: a child of the
// guest's. The guest is PID 1 of the sandbox. A filter can refuse pid 1 by
// number, and Landlock's signal scope refuses the guest's threads outside
// the sandbox's domain, but neither stops a thread id that names the whole
// guest: kill(TID) and rt_sigqueueinfo(TID) of one guest thread the sandbox
// may signal (an ns session's launcher thread, in the execs' own domain; on
// gVisor, any: it delivers SIGKILL and SIGSTOP to its init from inside),
// F_SETOWN of that TID, or pidfd_send_signal of a /proc/TID directory, each
// sends a signal to the whole guest, which the Go runtime would handle on
// another thread and die of (a SIGTERM ends a Go PID 1 with exit status 2,
// a queued SIGSEGV panics it). In a namespace of its own the command can
// name none of the guest's threads: kill, rt_sigqueueinfo, pidfd_open and
// F_SETOWN resolve numbers in the caller's namespace, and pidfd_send_signal
// refuses a process outside it. And /proc agrees: the init, in a mount
// namespace of its own, mounts the namespace's procfs over the sandbox's
// /proc, and the command's root is the init's: on gvisor by Chroot,
// through a descriptor the guest holds; on ns the thread that starts the
// commands joins the init's mount namespace (joinMounts), so that a
// command's mount table is its own. The guest itself keeps the sandbox's
// /proc in its own mount namespace: Go's setup of a command's user
// namespace writes /proc/PID/uid_map by the guest's numbers (on ns the
// guest writes them itself: mapLater). On gVisor a command that leaves
// its chroot (it is root of its own user namespace) finds the sandbox's
// /proc again, where a pidfd made from the /proc/1 directory would name the
// guest: gvisorProfile refuses pidfd_send_signal (on Linux the kernel
// refuses it for a process outside the caller's namespace).
//
// On the ns rung the init's mount namespace follows the guest's workspace:
// the guest binds the workspace's mount point over itself, shared, before
// the init copies its mounts, and the init makes its copies slaves (not
// private), so the overlay the guest mounts there later (and mounts again at
// every reset, rebase and fork) appears in the commands' namespace too. It
// also protects its /proc as the view's (lockProc).
//
// Its init is the guest binary as wire.RolePIDInit (runPIDInit): it reaps
// the orphans of the command, so the command itself is never an init. The guest starts the init in a new pid namespace
// (clone(CLONE_NEWPID)) and joins that namespace for its children on a
// locked thread (setns of a pid namespace applies to the calling thread's
// later children; gVisor refuses unshare(CLONE_NEWPID) to a process of
// several threads): every process the thread starts afterwards (the trial's
// stub, a session's execs) is the guest's child inside the namespace, which
// the guest waits for, times out and kills as before (it sees the
// namespace's processes, by their numbers in its own namespace).
//
// Inside gVisor the init is as killable as any init (kill of one of its
// thread ids): that ends the command's namespace and everything in it, the
// command's own doing, never the guest; a session then makes a new one. On
// the ns rung the init is outside the sandbox's Landlock domain (started
// before the launcher confines itself), which no command may signal.
type commandPIDNS struct {
	init  int      // the init's pid, in the guest's namespace
	hold  *os.File // the init exits at EOF on its end: close to end the namespace
	alive *os.File // hangs up when the init is gone
	// root is the init's root (O_PATH), in its mount namespace, whose /proc
	// is the namespace's: the commands' root (chroot). Held, not named
	// by /proc/INIT/root, whose number a command may have made another
	// process's once the init is gone.
	root *os.File
	// mntNS, when set, names the init's mount namespace (as
	// /proc/PID/ns/mnt does), which the thread that starts the commands
	// joined, root and all (joinMounts): its children need no chroot.
	mntNS string
}

// joined says whether the commands start in the init's mount namespace.
func (n *commandPIDNS) joined() bool { return n.mntNS != "" }

// chroot is the path a child of the guest chroots to (SysProcAttr.Chroot)
// to have the namespace's /proc: the init's root, through the guest's
// descriptor, which the child has until its exec.
func (n *commandPIDNS) chroot() string {
	return "/proc/self/fd/" + strconv.Itoa(int(n.root.Fd()))
}

// newCommandPIDNS starts the init of a new pid namespace, waits for it to
// run, and makes the calling thread's later children start in the
// namespace. follow makes the init's mounts slaves of the guest's (the ns
// rung's session, whose workspace is mounted again and again), protects its
// /proc (lockProc), and puts the calling thread in the init's mount
// namespace (joinMounts). The thread must be locked, never given back to the
// runtime (the Go runtime then starts its threads elsewhere: a thread
// cannot be made in another pid namespace), and not yet under the command's
// seccomp filter, which refuses setns and a new pid namespace.
func newCommandPIDNS(follow bool) (*commandPIDNS, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, err
	}
	holdR, holdW := os.NewFile(uintptr(p[0]), "pidns-hold"), os.NewFile(uintptr(p[1]), "pidns-hold")
	defer holdR.Close()
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		holdW.Close()
		return nil, err
	}
	aliveR, aliveW := os.NewFile(uintptr(p[0]), "pidns-alive"), os.NewFile(uintptr(p[1]), "pidns-alive")
	defer aliveW.Close()
	n := &commandPIDNS{hold: holdW, alive: aliveR}
	devnull, err := os.OpenFile("/dev/null", os.O_RDWR, 0)
	if err != nil {
		n.close()
		return nil, err
	}
	defer devnull.Close()
	files := []uintptr{devnull.Fd(), devnull.Fd(), devnull.Fd(), holdR.Fd(), aliveW.Fd()}
	args := []string{"dryexec", "guest", wire.RolePIDInit}
	if follow {
		args = append(args, pidInitFollow)
	}
	n.init, err = syscall.ForkExec(guestexe.Self(), args, &syscall.ProcAttr{
		Env:   []string{},
		Files: files,
		Sys:   &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWPID | unix.CLONE_NEWNS},
	})
	if err != nil {
		n.close()
		return nil, fmt.Errorf("starting the command's pid namespace init: %w", err)
	}
	aliveW.Close()
	// A zero byte once it runs as the namespace's init, else why not.
	var b [256]byte
	k, _ := io.ReadAtLeast(aliveR, b[:], 1)
	if k != 1 || b[0] != 0 {
		n.close()
		return nil, fmt.Errorf("the command's pid namespace init: %s", b[:k])
	}
	// The init is this process's child, not yet reaped: its pid names it.
	proc := "/proc/" + strconv.Itoa(n.init)
	if n.root, err = os.OpenFile(proc+"/root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		n.close()
		return nil, fmt.Errorf("the command's pid namespace init's root: %w", err)
	}
	fd, err := unix.Open(proc+"/ns/pid", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err == nil {
		err = unix.Setns(fd, unix.CLONE_NEWPID)
		unix.Close(fd)
	}
	if err != nil {
		n.close()
		return nil, fmt.Errorf("entering the command's pid namespace: %w", err)
	}
	if follow {
		ns, err := os.Readlink(proc + "/ns/mnt")
		if err == nil {
			err = joinMounts(proc + "/ns/mnt")
		}
		if err != nil {
			n.close()
			return nil, fmt.Errorf("entering the command's mount namespace: %w", err)
		}
		n.mntNS = ns
	}
	return n, nil
}

// joinMounts puts the calling thread in the mount namespace at nsPath (the
// init's), root and all, so that every child it forks starts there: a
// process's mount table (/proc/self/mountinfo, what df, findmnt and mount
// read) lists the mounts of its own mount namespace that its root reaches,
// and a child of the guest's namespace chrooted into the init's root (as a
// gvisor command is) would see none. Nothing the thread does may then open
// a path of the guest's /proc, which it no longer has: Go's fork writes a
// new user namespace's maps to /proc/PID/uid_map by the guest's pid
// numbers, so the ns session's execs start unmapped and the guest maps
// them from another thread (mapLater). The thread must be locked and never
// given back to the runtime (its filesystem context is its own after
// unshare(CLONE_FS)).
func joinMounts(nsPath string) error {
	ns, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(ns)
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare(CLONE_FS): %w", err)
	}
	if err := unix.Setns(ns, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("setns: %w", err)
	}
	return nil
}

// gone says whether the init has exited (its namespace with it).
func (n *commandPIDNS) gone() bool {
	fds := []unix.PollFd{{Fd: int32(n.alive.Fd()), Events: unix.POLLIN}}
	k, err := unix.Poll(fds, 0)
	return err == nil && k > 0 && fds[0].Revents&(unix.POLLHUP|unix.POLLERR) != 0
}

// close ends the namespace: its init exits, and the kernel kills every
// process left in it.
func (n *commandPIDNS) close() {
	if n == nil {
		return
	}
	if n.hold != nil {
		n.hold.Close()
		n.hold = nil
	}
	if n.alive != nil {
		n.alive.Close()
		n.alive = nil
	}
	if n.root != nil {
		n.root.Close()
		n.root = nil
	}
}

// pidInitFollow is runPIDInit's argument for newCommandPIDNS's follow.
const pidInitFollow = "follow"

// runPIDInit is wire.RolePIDInit, PID 1 of a commandPIDNS, in a mount
// namespace of its own: it mounts the namespace's /proc there (private, or
// with args [pidInitFollow] a slave of the guest's shared mounts, and then
// protected as the view's: the guest's /proc stays the sandbox's), says it runs
// on fd 4 (a zero byte; an error's text otherwise) and holds fd 4 for its
// life (the guest sees it hang up when the init is gone), then reaps whatever is
// reparented to it until the guest closes fd 3, then exits, which ends every
// process of the namespace. It ignores every signal it can (PID 1 gets from
// its namespace only those it handles, and the Go runtime would handle them
// all); SIGCHLD only wakes it.
func runPIDInit(args []string) int {
	follow := len(args) == 1 && args[0] == pidInitFollow
	signal.Ignore(guestIgnored...)
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, unix.SIGCHLD)
	alive := os.NewFile(4, "pidns-alive")
	if os.Getpid() != 1 {
		alive.WriteString("not the init of a pid namespace")
		return 1
	}
	prop := uintptr(unix.MS_PRIVATE)
	if follow {
		prop = unix.MS_SLAVE
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|prop, ""); err != nil {
		alive.WriteString("making its mounts private: " + err.Error())
		return 1
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		alive.WriteString("mounting its /proc: " + err.Error())
		return 1
	}
	if follow {
		if err := lockProc("", "/dev/null"); err != nil {
			alive.WriteString(err.Error())
			return 1
		}
	}
	if _, err := alive.Write([]byte{0}); err != nil {
		return 1
	}
	go func() {
		io.Copy(io.Discard, os.NewFile(3, "pidns-hold"))
		os.Exit(0)
	}()
	for {
		// A SIGCHLD during the loop stays in chld: no exit is missed.
		for {
			pid, err := unix.Wait4(-1, nil, unix.WNOHANG|unix.WALL, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if pid <= 0 || err != nil {
				break
			}
		}
		<-chld
	}
}
