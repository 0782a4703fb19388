package linuxns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/fsdelta"
	"github.com/dryexec/dryexec/internal/guestexe"
	"github.com/dryexec/dryexec/wire"
)

// The second wall. The guest supervisor runs in the sandbox's namespaces,
// beside the command: a command that kills it, or takes it over and makes it
// break the protocol, must not be able to turn its trial into "no delta" (an
// error the caller may retry or ignore, with nothing to block or review).
// Once the command was sent, a trial whose guest fails still ends with a
// delta: the host kills the guest (and so, by the pid namespace's rule,
// everything the command started), walks the upper dirs itself through the
// handle on the scratch tmpfs it took before the command started
// (openScratch), and marks the delta Incomplete, which the decision engine
// always blocks (policy). The walk runs in a short-lived helper process
// (wire.RoleHostWalk) and its report passes the same checks as a guest's.

// minHostWalk is the least time the host's own walk is given.
const minHostWalk = 30 * time.Second

// errOverdue is the cause of a trial's context ending because the guest
// did not report within the command's timeout and the walk grace.
var errOverdue = errors.New("the guest did not report in time")

// walkGrace is Rung.WalkGrace with its default.
func (r *Rung) walkGrace() time.Duration {
	if r.WalkGrace > 0 {
		return r.WalkGrace
	}
	return 60 * time.Second
}

// openScratch takes the host's own handle on guest pid's scratch tmpfs, which
// the guest holds as descriptor fd (wire.TrialMounts.ScratchFD), through
// /proc/PID/fd. It is called before the command exists: what the guest says
// then is still its own. The handle keeps the tmpfs (a detached mount in the
// guest's mount namespace) alive after the guest and its namespace are gone.
// Rootless this works because the host owns the guest's user namespace.
func openScratch(pid, fd int) (*os.File, string) {
	if fd <= 0 {
		return nil, "the guest named no scratch tmpfs"
	}
	p := "/proc/" + strconv.Itoa(pid) + "/fd/" + strconv.Itoa(fd)
	h, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Sprintf("opening the guest's scratch tmpfs: %v", err)
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(h, &sfs); err != nil || sfs.Type != unix.TMPFS_MAGIC {
		unix.Close(h)
		return nil, "the guest's scratch descriptor is not a tmpfs"
	}
	return os.NewFile(uintptr(h), "scratch"), ""
}

// salvage ends a trial whose guest failed (cause) after the command was sent:
// an Incomplete delta with what the host can see itself.
func (t *trial) salvage(ctx context.Context, cause error) (*dryexec.StateDelta, error) {
	// A stream that ended usually means a guest on its way out: its exit
	// status says how (killed, crashed), once the kernel has finished
	// tearing its namespace down.
	var wait time.Duration
	if t.streamEnded {
		wait = GuestExitWait
	}
	state, ended := GuestState(t.cmd.Process.Pid, wait)
	switch {
	case t.overdue:
		state = "did not report in time (the host killed it)"
	case !ended:
		state = "was alive but broke the protocol"
	}
	// The guest is PID 1 of the sandbox's pid namespace: its death kills
	// every process in it, and its wait returns only once they are all
	// reaped. Nothing writes to the upper dirs after this.
	t.cmd.Process.Kill()
	t.cmd.Wait()
	if t.exit == nil {
		t.contained(&t.seen)
	}
	t.net.stop()
	a := t.spec.Action
	d := &dryexec.StateDelta{TrialID: t.spec.TrialID, Rung: Name, Action: a, Incomplete: true}
	why := []string{fmt.Sprintf("the guest supervisor %s mid-trial (%v)", state, cause)}
	files, touched, werr := t.hostWalk(ctx)
	switch {
	case werr != nil && files == nil:
		why = append(why, fmt.Sprintf("the host could not walk the upper dirs (%v): the file changes are unknown", werr))
	case werr != nil:
		why = append(why, fmt.Sprintf("the host's walk of the upper dirs stopped early (%v): the files listed are those walked before", werr))
	default:
		why = append(why, "the files are the host's own walk of the upper dirs")
	}
	d.Files, d.Touched = files, touched
	d.Violations = append(d.Violations, t.seen.Violations...)
	d.Warnings = append(d.Warnings, t.seen.Warnings...)
	d.Memory.Method = "none"
	d.Memory.PeakRSSBytes = t.seen.Memory.PeakRSSBytes
	if ex := t.exit; ex != nil {
		// Sent once every sandbox process was dead, before the failure.
		t.fillProcess(d, ex, &wire.TrialDone{})
		fillContainment(d, ex)
		why = append(why, "the exit status is the guest's report from before it failed; CPU time is unknown")
	} else {
		d.Process.ExitCode = -1
		d.Process.DurationNS = max(wire.MonoNow()-t.sentAt, 0)
		why = append(why, "the command's exit status is unknown (exit_code -1), and so are its CPU time and memory")
	}
	d.Process.PeakRSSBytes = d.Memory.PeakRSSBytes
	d.IncompleteReason = strings.Join(why, "; ")
	t.pipes.Wait()
	out, otr := t.out.Bytes()
	errb, etr := t.errb.Bytes()
	d.Process.Stdout, d.Process.StdoutTruncated = string(out), otr
	d.Process.Stderr, d.Process.StderrTruncated = string(errb), etr
	d.Normalize()
	d.ComputeTotals()
	if t.r.Log != nil {
		t.r.Log.Warn("trial incomplete: the guest failed", "trial", t.spec.TrialID, "reason", d.IncompleteReason)
	}
	return d, nil
}

// GuestExitWait bounds how long to wait for a guest whose stream ended to be
// seen dead (GuestState), to say how it died. The pid namespace's teardown
// is quick (all its processes are SIGKILLed), but not instant.
const GuestExitWait = time.Second

// GuestState says how guest process pid (a child of this process) ended —
// "died (killed)", "exited (status 1)" — without reaping it, waiting up to
// wait for it to end; ended is false if it has not (or cannot be seen).
func GuestState(pid int, wait time.Duration) (state string, ended bool) {
	if wait > 0 {
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			// Readable once the process has exited.
			unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(wait.Milliseconds()))
			unix.Close(fd)
		}
	}
	var si unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &si, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil || si.Signo == 0 {
		return "", false
	}
	c := (*sigchldInfo)(unsafe.Pointer(&si))
	if c.Code == cldExited {
		return fmt.Sprintf("exited (status %d)", c.Status), true
	}
	return fmt.Sprintf("died (%v)", syscall.Signal(c.Status)), true
}

// sigchldInfo is unix.Siginfo as the kernel fills it for a child's state
// change (the SIGCHLD member of siginfo_t's union on 64-bit Linux).
type sigchldInfo struct {
	Signo, Errno, Code, _ int32
	Pid, UID, Status      int32
	_                     [100]byte
}

// cldExited is si_code CLD_EXITED: Status is an exit status (else a signal).
const cldExited = 1

// hostWalk walks the upper dirs of the dead guest's scratch tmpfs in a helper
// process (wire.RoleHostWalk) and diffs them as a guest's report. Rootless,
// the helper is root of a user namespace of its own that maps the caller,
// which owns every upper entry: it can read what the command made unreadable
// (mode 000), as the guest could.
func (t *trial) hostWalk(ctx context.Context) (files, touched []dryexec.FileChange, err error) {
	if t.scratch == nil {
		return nil, nil, errors.New(t.scratchErr)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	unix.SetNonblock(fds[0], true)
	ctrl := os.NewFile(uintptr(fds[0]), "walk")
	defer ctrl.Close()
	helperEnd := os.NewFile(uintptr(fds[1]), "walk-helper")
	exe := t.r.GuestExe
	if exe == "" {
		exe = guestexe.Executable()
	}
	xattrs := "trusted"
	attr := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC, Pdeathsig: syscall.SIGKILL}
	if uid := os.Getuid(); uid != 0 {
		xattrs = "user"
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
		attr.GidMappingsEnableSetgroups = false
	}
	cmd := &exec.Cmd{Path: exe, Args: []string{"dryexec", "guest", wire.RoleHostWalk, strconv.Itoa(len(t.uppers)), xattrs},
		Env: []string{}, ExtraFiles: []*os.File{helperEnd, t.scratch}, SysProcAttr: attr}
	err = cmd.Start()
	helperEnd.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("starting the walk helper: %w", err)
	}
	// The helper starts a process of its own (tens of ms, more on a busy
	// host): a short WalkGrace, which bounds the guest's report, must not
	// cut it short.
	limit := max(t.r.walkGrace(), minHostWalk)
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { cmd.Process.Kill() })
	defer stop()
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	differ := fsdelta.NewDiffer(t.uppers, t.spec.Blobs, t.spec.DiffMaxBytes)
	defer differ.Close()
	if os.Getuid() != 0 {
		differ.SetOwner(os.Getuid(), os.Getgid())
	}
	// Never read what the sandbox saw masked; the delta is Incomplete (and
	// blocked) anyway, so what was left out needs no reason of its own.
	differ.SetHidden(t.hiddenHostPaths())
	conn := wire.NewConn(ctrl)
	var werr error
	for werr == nil {
		f, err := conn.Read()
		switch {
		case err != nil:
			werr = fmt.Errorf("reading the walk: %w", err)
			if ctx.Err() != nil {
				werr = fmt.Errorf("the walk took longer than %v", limit)
			}
		case f.Kind == wire.KindErr:
			var re wire.RemoteError
			f.Decode(&re)
			werr = &re
		case f.Verb == wire.VerbFSEntry:
			werr = t.addEntry(conn, differ, f)
		case f.Verb == wire.VerbTrialDone:
			files, err := differ.Finish()
			return files, differ.Touched(), err
		default:
			werr = fmt.Errorf("unexpected %s %q from the walk", f.Kind, f.Verb)
		}
	}
	if se := (*fsdelta.StoreError)(nil); errors.As(werr, &se) {
		return nil, nil, werr
	}
	files, err = differ.Finish()
	if err != nil {
		return nil, nil, werr
	}
	return files, differ.Touched(), werr
}
