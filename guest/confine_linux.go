package guest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/containment/seccomp"
	"github.com/dryexec/dryexec/wire"
)

// A launcher is the one OS thread of the guest that starts sandboxed
// processes. Go offers no hook between fork and exec, but seccomp filters,
// no_new_privs and Landlock domains are per thread and inherited by every child
// a thread forks: so the guest locks a goroutine to a fresh thread, confines
// that thread (no_new_privs, Landlock, the seccomp filter with a listener),
// and from then on forks commands only from it. The rest of the guest (PID 1's
// other threads: the wire, the overlay walks, session remounts, the seccomp
// supervisor) stays unconfined. The Go runtime never clones a new thread from
// a locked one (it asks its template thread), and a locked goroutine that
// returns takes its thread with it, so the confinement cannot leak into the
// guest.
//
// The filter lets clone(CLONE_NEWUSER) through (and refuses every other
// namespace flag): the launcher needs it to start a command in its own user
// namespace, and Go's fork is a raw clone the seccomp supervisor could not be
// asked about without risking a deadlock with the garbage collector (see
// containment/seccomp's profile).
type launcher struct {
	reqs chan func()
	// stopping is closed by stop: the thread ends, and do refuses new work
	// (a session's exec may still be starting when the host goes).
	stopping chan struct{}
	stopOnce sync.Once
	exited   chan struct{} // closed when the launcher's goroutine (and thread) ended
	served   chan struct{} // closed when the supervisor stopped (no process uses the filter)
	log      *violationLog
	srv      *seccomp.Server
	cancel   context.CancelFunc
}

// violationLog collects refused calls from the supervisor.
type violationLog struct {
	mu   sync.Mutex // guards list and dropped
	list []wire.Violation
	// dropped counts violations past maxViolations (a loop of refused calls
	// must not grow the report without bound).
	dropped int
}

// maxViolations bounds the violations one trial or exec reports; the rest are
// counted in one summary entry.
const maxViolations = 256

func (l *violationLog) add(ev *seccomp.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.list) >= maxViolations {
		l.dropped++
		return
	}
	l.list = append(l.list, wire.Violation{Kind: "syscall", Detail: ev.Detail + ": " + ev.Errno.Error() + " (" + ev.Why + ")",
		PID: ev.PID, Exe: ev.Exe})
}

// take returns and forgets what was collected.
func (l *violationLog) take() []wire.Violation {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.list
	if l.dropped > 0 {
		out = append(out, wire.Violation{Kind: "syscall", Detail: fmt.Sprintf("%d more refused system calls not listed", l.dropped)})
	}
	l.list, l.dropped = nil, 0
	return out
}

// confinement is what a launcher applies to its thread.
type confinement struct {
	prog     []unix.SockFilter
	profile  *seccomp.Profile
	landlock int // ruleset fd, or -1 when the kernel has no Landlock
	// nested is the ruleset a trial's command stub enters (nestedRuleset),
	// or -1 (no Landlock signal scope).
	nested int
	// renames, when set, performs the sandbox's renames of lower dirs that
	// the overlays refuse (rootless: see renamer).
	renames bool
	// filterOnly: the seccomp filter alone, answered in the filter (no
	// listener, no supervisor, nothing reported) and no blocked signals: a
	// gvisor session's launcher (filterLauncher).
	filterOnly bool
	// prepare, when not nil, runs on the launcher thread before the
	// filter applies (a session's pid namespace, which the filter would
	// refuse: commandPIDNS).
	prepare func() error
	// mntNS, when not nil, names (as /proc/PID/ns/mnt does) the mount
	// namespace prepare moved the launcher thread to, where the commands
	// then run (joinMounts): the renamer stands in only for callers there.
	mntNS func() string
}

// newConfinement compiles the filter and builds the Landlock ruleset; it must
// run after the sandbox's view is in place (pivot_root done, the workspace's
// mount point made), since Landlock rules hold the view's directories.
//
// With renames (rootless, where the overlays cannot have redirect_dir=on),
// the filter hands rename, renameat and renameat2 to the supervisor, whose
// renamer moves the host's dirs the overlay refuses to; link and linkat go
// to it too, so that a host file and its new link report one identity
// (link_linux.go).
func newConfinement(renames bool) (*confinement, error) {
	p := seccomp.Default()
	if renames {
		p.Handle("a rootless overlay refuses to rename a host dir (EXDEV): the supervisor does it with the caller's rights", renameCalls...)
		p.Handle("a rootless overlay gives a host file linked to two identities: the supervisor links it with the caller's rights", linkCalls...)
	}
	prog, err := p.Program(true)
	if err != nil {
		return nil, err
	}
	ll, err := landlockRuleset()
	if err != nil {
		return nil, err
	}
	nested, err := nestedRuleset()
	if err != nil {
		if ll >= 0 {
			unix.Close(ll)
		}
		return nil, err
	}
	return &confinement{prog: prog, profile: p, landlock: ll, nested: nested, renames: renames}, nil
}

func (c *confinement) close() {
	for _, fd := range []int{c.landlock, c.nested} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// filterLauncher starts a launcher thread under no_new_privs and p's filter
// alone: a gvisor session's, which starts every exec as the gvisor trial's
// guest starts its command (startGVisorStub). gVisor has no Landlock and no
// user notification, so nothing is reported and the thread keeps its signals
// (no trampoline needed); the profile's refusals of signals to PID 1 are
// what keeps an exec from ending the session's guest: gVisor delivers
// SIGKILL to its init from inside (TestSignalsToGuestGVisor).
func filterLauncher(p *seccomp.Profile, prepare func() error) (*launcher, error) {
	prog, err := p.Program(false)
	if err != nil {
		return nil, err
	}
	return startLauncher(&confinement{prog: prog, profile: p, landlock: -1, nested: -1, filterOnly: true, prepare: prepare})
}

// startLauncher starts a launcher thread confined by c.
func startLauncher(c *confinement) (*launcher, error) {
	var rn *renamer
	if c.renames {
		var err error
		if rn, err = newRenamer(c); err != nil {
			return nil, fmt.Errorf("the renamer: %w", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &launcher{reqs: make(chan func()), stopping: make(chan struct{}), exited: make(chan struct{}), served: make(chan struct{}), log: &violationLog{}, cancel: cancel}
	type ready struct {
		fd  int
		err error
	}
	readyc := make(chan ready, 1)
	go func() {
		defer close(l.exited)
		// Never unlocked: the thread ends with this goroutine.
		runtime.LockOSThread()
		var err error
		if !c.filterOnly {
			err = blockAllSignals()
		}
		if err == nil && c.prepare != nil {
			err = c.prepare()
		}
		fd := -1
		if err == nil {
			fd, err = c.apply()
		}
		readyc <- ready{fd, err}
		if err != nil {
			return
		}
		for {
			select {
			case f := <-l.reqs:
				f()
			case <-l.stopping:
				return
			}
		}
	}()
	r := <-readyc
	if r.err != nil {
		cancel()
		<-l.exited
		if rn != nil {
			rn.close()
		}
		return nil, r.err
	}
	if rn != nil && c.mntNS != nil {
		if ns := c.mntNS(); ns != "" {
			rn.mntNS = ns
		}
	}
	if r.fd < 0 {
		// No listener: nothing to serve.
		close(l.served)
		return l, nil
	}
	l.srv = &seccomp.Server{Profile: c.profile, Report: l.log.add}
	if rn != nil {
		l.srv.Handle = rn.handle
	}
	go func() {
		defer close(l.served)
		l.srv.Serve(ctx, r.fd)
		if rn != nil {
			rn.close()
		}
	}()
	return l, nil
}

// blockAllSignals blocks every signal on the calling (locked) thread, for
// the rest of its life. The launcher thread is the one thread of the guest in
// the sandbox's Landlock domain, so Landlock's signal scope does not keep the
// sandbox's processes from signalling it: tgkill(1, launcher, SIGSEGV), or a
// queued signal with a forged si_code, or SIGIO aimed at its tid
// (F_SETOWN_EX), would run the Go runtime's handler there and end the guest
// (the runtime treats a SIGSEGV that is not from kill as a fault). Blocked,
// a signal aimed at this thread stays pending until the thread ends, and
// SIGKILL and SIGSTOP, which cannot be blocked, are dropped by the kernel
// for the init of a pid namespace when they come from inside it.
// Process-directed signals go to a thread that does not block them, outside
// the domain, where the scope refuses them. The mask is inherited by every
// process the thread forks, so each one first unblocks everything (the
// command stub, and the exec trampoline in front of a session's processes:
// see execTrampoline).
func blockAllSignals() error {
	var all unix.Sigset_t
	for i := range all.Val {
		all.Val[i] = ^uint64(0)
	}
	if err := unix.PthreadSigmask(unix.SIG_BLOCK, &all, nil); err != nil {
		return fmt.Errorf("blocking signals on the launcher thread: %w", err)
	}
	return nil
}

// apply confines the calling (locked) thread and returns the listener.
func (c *confinement) apply() (int, error) {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return -1, fmt.Errorf("no_new_privs: %w", err)
	}
	if c.landlock >= 0 {
		if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(c.landlock), 0, 0); e != 0 {
			return -1, fmt.Errorf("landlock_restrict_self: %w", e)
		}
	}
	return seccomp.Install(c.prog, !c.filterOnly)
}

// violations returns and forgets what the supervisor refused so far,
// complete up to the last call of a process that is dead now.
func (l *launcher) violations() []wire.Violation {
	if l.srv == nil {
		return nil
	}
	l.srv.Quiesce()
	return l.log.take()
}

// errStopped: the launcher was stopped; nothing more is started.
var errStopped = errors.New("the sandbox's launcher has stopped")

// do runs f on the launcher's thread and waits for it. f may start processes.
func (l *launcher) do(f func()) error {
	done := make(chan struct{})
	select {
	case l.reqs <- func() {
		defer close(done)
		f()
	}:
		<-done
		return nil
	case <-l.stopping:
		return errStopped
	}
}

// stop ends the launcher's thread. The supervisor goes on answering until no
// process uses the filter any more; wait bounds how long stop waits for that
// (0: not at all), after which it stops the supervisor.
func (l *launcher) stop(wait time.Duration) {
	l.stopOnce.Do(func() { close(l.stopping) })
	<-l.exited
	if wait > 0 {
		select {
		case <-l.served:
		case <-time.After(wait):
		}
	}
	l.cancel()
	<-l.served
}

// landlockRuleset builds the Landlock ruleset, or returns -1 when the kernel
// has none (best effort: the sandbox then runs without this wall). The
// overlay view already catches every write, so Landlock is not asked to
// fence paths (its rules would also not survive the session's workspace
// remounts: a rule on a directory a mount covers is ignored). It handles:
//
//   - making device nodes (MAKE_CHAR, MAKE_BLOCK), granted nowhere;
//   - moving and linking files between directories (REFER, ABI 2), granted
//     beneath / (see referRule);
//   - ioctls on device files (ABI 5), granted only beneath /dev (the
//     sandbox's own minimal /dev: null, zero, tty, pts, …);
//   - signals and abstract unix sockets (ABI 6 scopes): a sandboxed process
//     may signal or connect only within the sandbox, so it cannot signal the
//     guest's threads outside this domain (PID 1 installs handlers, so the
//     pid namespace's protection of init does not stop a SIGTERM from
//     inside). The launcher thread itself is in the domain: see
//     blockAllSignals.
func landlockRuleset() (int, error) {
	abi, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e != 0 {
		return -1, nil // ENOSYS or EOPNOTSUPP: see docs/containment.md
	}
	attr := unix.LandlockRulesetAttr{Handled_access_fs: unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK}
	size := uintptr(8)
	if abi >= 4 {
		size = 16
	}
	if abi >= 2 {
		attr.Handled_access_fs |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 5 {
		attr.Handled_access_fs |= unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	}
	if abi >= 6 {
		attr.Scoped = unix.LANDLOCK_SCOPE_SIGNAL | unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
		size = 24
	}
	rs, err := createRuleset(&attr, size)
	if err != nil {
		return -1, err
	}
	if abi >= 2 {
		if err := referRule(rs); err != nil {
			unix.Close(rs)
			return -1, err
		}
	}
	if abi >= 5 {
		if err := addPathRule(rs, "/dev", unix.LANDLOCK_ACCESS_FS_IOCTL_DEV); err != nil {
			unix.Close(rs)
			return -1, err
		}
	}
	return rs, nil
}

// nestedRuleset builds the ruleset of the domain a trial's command stub
// enters before it execs the command (ABI 6, else -1): nested in the
// launcher's, scoped for signals and abstract unix sockets, so that nothing
// the command starts can signal any thread of the guest, the launcher's
// included (Landlock lets a process signal only its own domain and the
// domains nested in it, never a parent's). It must grant REFER beneath / as
// the launcher's does: every layer of a domain denies moving files between
// directories unless a rule of that layer grants it.
func nestedRuleset() (int, error) {
	abi, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e != 0 || abi < 6 {
		return -1, nil
	}
	attr := unix.LandlockRulesetAttr{Handled_access_fs: unix.LANDLOCK_ACCESS_FS_REFER,
		Scoped: unix.LANDLOCK_SCOPE_SIGNAL | unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET}
	rs, err := createRuleset(&attr, 24)
	if err != nil {
		return -1, err
	}
	if err := referRule(rs); err != nil {
		unix.Close(rs)
		return -1, err
	}
	return rs, nil
}

func createRuleset(attr *unix.LandlockRulesetAttr, size uintptr) (int, error) {
	fd, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(attr)), size, 0)
	if e != 0 {
		return -1, fmt.Errorf("landlock_create_ruleset: %w", e)
	}
	return int(fd), nil
}

// referRule grants REFER beneath the sandbox's root. Without it a rename or
// link between two directories fails with EXDEV (os.rename("a/x", "b/x"),
// tar and rsync -H with hard links, git mv, a local git clone), because
// Landlock denies reparenting in every domain that does not grant it. It is
// safe to grant everywhere: the overlay view captures every move, and
// Landlock still refuses a move that would give a file more of the handled
// rights than it had (one moved into /dev gains IOCTL_DEV and is refused;
// device nodes are made nowhere, so none can be moved anywhere). The rule
// holds on / as the sandbox sees it after pivot_root, and Landlock checks a
// path by walking up through its mount points to that root, so it also
// covers the session's workspace, remounted beneath it.
func referRule(rs int) error {
	return addPathRule(rs, "/", unix.LANDLOCK_ACCESS_FS_REFER)
}

func addPathRule(rs int, path string, access uint64) error {
	dir, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("landlock rule for %s: %w", path, err)
	}
	defer unix.Close(dir)
	r := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(dir)}
	if _, _, e := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(rs), unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&r)), 0, 0, 0); e != 0 {
		return fmt.Errorf("landlock rule for %s: %w", path, e)
	}
	return nil
}
