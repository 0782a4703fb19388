package viewtrial

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/fsdelta"
	"github.com/dryexec/dryexec/internal/tail"
	"github.com/dryexec/dryexec/rung/linuxns"
	"github.com/dryexec/dryexec/wire"
)

// Trial is the host side of one trial in a sandbox with a kernel of its
// own: what the rung fills in before it starts the view guest, and what the
// conversation and the walk leave for the delta. A rung embeds it in its
// own trial, beside what its sandbox needs (runsc's flags, QEMU's ports).
type Trial struct {
	Spec   dryexec.TrialSpec
	Mounts []wire.MountSpec
	Cover  linuxns.Cover
	// Rung is the delta's rung; What names the sandbox in errors and in
	// the delta's incomplete reason ("the gvisor sandbox", "the VM").
	Rung, What string
	// TailName and Tail are the sandbox's own error output (runsc's;
	// QEMU's and the console's), added to a guest error.
	TailName string
	Tail     func() string
	// Trace is the rung's (see gvisor.Rung.Trace); Log its logger.
	Trace func(phase string)
	Log   *slog.Logger
	// CollectMin and CollectTimeout are linuxns.Rung's.
	CollectMin, CollectTimeout time.Duration
	// InnerStart, when set, completes the trial.start the guest inside
	// the sandbox gets (the vm rung on an image: netsim's files, which
	// its guest then binds itself, not the view guest).
	InnerStart func(*wire.TrialStart)

	// Cmd is the view guest, then what it became (runsc, QEMU); Waited
	// closes once it has been waited for (WaitErr).
	Cmd      *exec.Cmd
	Waited   chan struct{}
	WaitErr  error
	View     *wire.Conn // the view guest's stream, until its exec
	ViewCtrl *os.File
	Inner    *wire.Conn // the guest's inside the sandbox
	Out      *tail.Buffer
	Errb     *tail.Buffer
	Pipes    sync.WaitGroup

	Watch     *linuxns.MaskWatch
	Uppers    []fsdelta.Mount
	Scratch   *os.File // the host's handle on the scratch tmpfs (upper dirs)
	ScratchFD int
	// ViewRoot is the host's handle on the merged view while the sandbox
	// runs (OpenViewRoot), through which it makes the FIFOs the sandbox
	// asks for (wire.VerbTrialNode); nil: it makes none.
	ViewRoot *os.File
	// nodesMade counts the inodes the host made for the sandbox: FIFOs
	// through ViewRoot (trial.node), FIFOs and their directories from
	// trial.done's list (maxViewNodes bounds them together).
	nodesMade int

	Sent    bool
	SentAt  time.Time
	Expired bool   // the walk ran out of time to keep content
	Crossed string // why the walk refused to look into masked or hidden paths ("": it did not)
	// UpperFull: the scratch tmpfs (the write budget) was full at the
	// command's end or after the sandbox's.
	UpperFull bool
	Exit      *wire.TrialExit
	Done      *wire.TrialDone
}

// trace passes phase to the rung's Trace.
func (t *Trial) trace(phase string) {
	if t.Trace != nil {
		t.Trace(phase)
	}
}

// StartWait waits for Cmd in the background (Waited, WaitErr).
func (t *Trial) StartWait() {
	t.Waited = make(chan struct{})
	go func() {
		t.WaitErr = t.Cmd.Wait()
		close(t.Waited)
	}()
}

// Ended says how the view guest's process (runsc, QEMU: what it became)
// ended, waiting up to wait for it: a session's guest ends with it, and it
// with the guest. ok is false if it has not ended.
func (t *Trial) Ended(wait time.Duration) (how string, ok bool) {
	select {
	case <-t.Waited:
	case <-time.After(wait):
		return "", false
	}
	st := t.Cmd.ProcessState
	if st == nil {
		return "", false
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("died (%v)", ws.Signal()), true
	}
	return fmt.Sprintf("exited (status %d)", st.ExitCode()), true
}

// Kill ends the view guest's process, and with it the sandbox.
func (t *Trial) Kill() {
	if t.Cmd != nil && t.Cmd.Process != nil {
		t.Cmd.Process.Kill()
	}
}

// Close kills the sandbox if it still runs and frees what the host holds
// of it (the rung frees its own first: its cgroup, its descriptors).
func (t *Trial) Close() {
	if t.ViewCtrl != nil {
		t.ViewCtrl.Close()
	}
	if t.Cmd != nil && t.Cmd.Process != nil && t.Waited != nil {
		t.Cmd.Process.Kill()
		<-t.Waited
	}
}

// Release waits for the output copiers and drops the masks' pins and the
// scratch handle: last, once every descriptor the copiers read is closed.
func (t *Trial) Release() {
	t.Pipes.Wait()
	t.Watch.Close()
	if t.Scratch != nil {
		t.Scratch.Close()
	}
	if t.ViewRoot != nil {
		t.ViewRoot.Close()
	}
}

// GuestErr is a guest error while doing, with the sandbox's own error
// output.
func (t *Trial) GuestErr(doing string, err error) error {
	if t.Tail != nil {
		if msg := strings.TrimSpace(t.Tail()); msg != "" {
			return fmt.Errorf("%w: %s: %w (%s: %s)", dryexec.ErrGuest, doing, err, t.TailName, msg)
		}
	}
	return fmt.Errorf("%w: %s: %w", dryexec.ErrGuest, doing, err)
}

// ReadFrame reads the next frame of conn, turning a guest's error frame
// into an error.
func ReadFrame(conn *wire.Conn) (*wire.Frame, error) {
	f, err := conn.Read()
	if err != nil {
		return nil, err
	}
	if f.Kind == wire.KindErr {
		var re wire.RemoteError
		f.Decode(&re)
		re.Code, re.Message = clipGuest(re.Code), clipGuest(re.Message)
		return nil, &re
	}
	return f, nil
}

// maxGuestText bounds each string of the guest's own that the host puts in
// an error or a delta's incomplete reason: the sandbox's guest may be the
// sandbox's (root in a VM can replace it), and a frame's header may hold
// 1 MiB of whatever it likes.
const maxGuestText = 1 << 10

// clipGuest is s cut to maxGuestText bytes, marked when cut.
func clipGuest(s string) string {
	if len(s) <= maxGuestText {
		return s
	}
	return strings.ToValidUTF8(s[:maxGuestText], "") + "… (cut at 1 KiB)"
}

// Hello reads and checks a guest's hello on conn.
func (t *Trial) Hello(conn *wire.Conn, role string) error {
	f, err := ReadFrame(conn)
	if err != nil {
		return t.GuestErr("reading the "+role+" guest's hello", err)
	}
	var h wire.Hello
	if f.Kind != wire.KindHello || f.Decode(&h) != nil {
		return fmt.Errorf("%w: bad hello from the %s guest", dryexec.ErrGuest, role)
	}
	if h.Version != wire.Version || h.Role != role {
		return fmt.Errorf("%w: the guest %s speaks protocol %d as %q, this dryexec %d as %q (a dryexec-guest from another build?)",
			dryexec.ErrGuest, t.Cmd.Path, h.Version, h.Role, wire.Version, role)
	}
	return nil
}

// BuildView has the view guest build the view (start: its mounts, masks,
// write budget and network files), takes the host's handle on its scratch
// tmpfs and pins the masks through it, before anything of the sandbox's
// runs.
func (t *Trial) BuildView(start *wire.TrialStart) error {
	if err := t.Hello(t.View, wire.RoleGVisorView); err != nil {
		return err
	}
	if err := t.View.Send(wire.KindReq, wire.VerbTrialStart, 1, start, wire.Attachments(start.TrustBundle)...); err != nil {
		return t.GuestErr("sending trial.start", err)
	}
	f, err := ReadFrame(t.View)
	if err != nil {
		return t.GuestErr("building the view", err)
	}
	var tm wire.TrialMounts
	if f.Verb != wire.VerbTrialMounts || f.Decode(&tm) != nil {
		return fmt.Errorf("%w: unexpected %s %q before trial.mounts", dryexec.ErrGuest, f.Kind, f.Verb)
	}
	if t.Uppers, err = CheckUppers(tm.Paths, t.Mounts); err != nil {
		return err
	}
	if err := t.openScratch(tm.ScratchFD); err != nil {
		return err
	}
	t.Watch = linuxns.NewMaskWatch()
	if len(t.Cover.Masks) > 0 {
		root, err := unix.Openat(t.ScratchFD, "root", unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("opening the view's root: %w", err)
		}
		t.Watch.PinRoot(root, t.Cover.Masks)
		unix.Close(root)
	}
	t.trace("view")
	return nil
}

// ExecView has the view guest become program (ex), from its scratch dir.
func (t *Trial) ExecView(ex *wire.GVisorExec, program string) error {
	if err := t.View.Send(wire.KindReq, wire.VerbGVisorExec, 2, ex); err != nil {
		return t.GuestErr("sending the exec of "+program, err)
	}
	// The stream closes when the view guest execs (close-on-exec).
	if f, err := ReadFrame(t.View); err == nil {
		return fmt.Errorf("%w: unexpected %s %q instead of %s", dryexec.ErrGuest, f.Kind, f.Verb, program)
	} else if re := (*wire.RemoteError)(nil); errors.As(err, &re) {
		return t.GuestErr("starting "+program, err)
	}
	t.ViewCtrl.Close()
	t.ViewCtrl = nil
	return nil
}

// openScratch takes the host's own handle on the view guest's scratch
// tmpfs, through /proc/PID/fd, before anything of the sandbox's runs: the
// host walks the upper dirs through it once the sandbox is gone.
func (t *Trial) openScratch(fd int) error {
	if fd <= 0 {
		return fmt.Errorf("%w: the view guest named no scratch tmpfs", dryexec.ErrGuest)
	}
	h, err := unix.Open("/proc/"+strconv.Itoa(t.Cmd.Process.Pid)+"/fd/"+strconv.Itoa(fd), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the view's scratch tmpfs: %w", err)
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(h, &sfs); err != nil || sfs.Type != unix.TMPFS_MAGIC {
		unix.Close(h)
		return fmt.Errorf("%w: the view guest's scratch descriptor is not a tmpfs", dryexec.ErrGuest)
	}
	t.Scratch, t.ScratchFD = os.NewFile(uintptr(h), "scratch"), h
	return nil
}

// CheckUppers validates the view guest's list of upper dirs: each must be a
// clean absolute path within a planned mount.
func CheckUppers(paths []string, mounts []wire.MountSpec) ([]fsdelta.Mount, error) {
	if len(paths) == 0 || len(paths) > 4096 {
		return nil, fmt.Errorf("%w: %d upper dirs", dryexec.ErrGuest, len(paths))
	}
	dm := make([]fsdelta.Mount, len(paths))
	for i, p := range paths {
		ok := false
		for _, m := range mounts {
			ok = ok || p == m.Path || m.Path == "/" || strings.HasPrefix(p, m.Path+"/")
		}
		if !strings.HasPrefix(p, "/") || path.Clean(p) != p || !ok {
			return nil, fmt.Errorf("%w: upper dir for %q is outside the planned mounts", dryexec.ErrGuest, p)
		}
		dm[i] = fsdelta.Mount{Path: p}
	}
	return dm, nil
}

// UpperFull says whether the tmpfs at fd has no block or inode left.
func UpperFull(fd int) bool {
	var sfs unix.Statfs_t
	return unix.Fstatfs(fd, &sfs) == nil && (sfs.Bavail == 0 || sfs.Ffree == 0)
}

// CommandNPROC is the command's RLIMIT_NPROC inside a kernel of the
// sandbox's own: the trial's pids limit (its default when 0; none when
// negative). The sandbox's processes are not the host's, so the host's
// pids limit cannot count them.
func CommandNPROC(l dryexec.Limits) int64 {
	switch {
	case l.Pids < 0:
		return 0
	case l.Pids == 0:
		return dryexec.DefaultPids
	}
	return l.Pids
}

// CopyOut copies src into dst until its end, then closes it.
func CopyOut(dst io.Writer, src *os.File) {
	defer src.Close()
	io.Copy(dst, src)
}

// WithTrust is env ("K=V" entries) with netsim's trust variables (trustEnv)
// over it, sorted: they win over the caller's own (a CA bundle the command
// was told about elsewhere would not hold netsim's CA); they are the
// sandbox's plumbing, not recorded in the action.
func WithTrust(env, trustEnv []string) []string {
	env = slices.DeleteFunc(env, func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.ContainsFunc(trustEnv, func(tv string) bool { return strings.HasPrefix(tv, k+"=") })
	})
	env = append(env, trustEnv...)
	sort.Strings(env)
	return env
}

// Converse starts the command inside the sandbox (the guest has greeted on
// Inner) and reads how it ended. trustEnv are netsim's trust variables for
// the command; sendStub writes the command's stub request (and ends it),
// startIO starts copying its output and stdin.
func (t *Trial) Converse(trustEnv []string, sendStub func([]byte) error, startIO func()) error {
	a := t.Spec.Action
	host, _ := os.Hostname()
	start := wire.TrialStart{Hostname: host, CommandUserNS: true, CommandNPROC: CommandNPROC(t.Spec.Limits),
		WallNS: time.Now().UnixNano()}
	if t.InnerStart != nil {
		t.InnerStart(&start)
	}
	if err := t.Inner.Send(wire.KindReq, wire.VerbTrialStart, 1, &start, wire.Attachments(start.TrustBundle)...); err != nil {
		return t.GuestErr("sending trial.start", err)
	}
	env := make([]string, 0, len(a.Env))
	for k, v := range a.Env {
		env = append(env, k+"="+v)
	}
	env = WithTrust(env, trustEnv)
	// The sandbox's monotonic clock is its own: the guest times the
	// command from trial.run, which therefore goes before the command.
	run := wire.TrialRun{Argv: a.Argv, Env: env, Cwd: a.Cwd, TimeoutMS: a.TimeoutMS, Stdin: t.Spec.Stdin != nil}
	req, err := wire.StubRequest(&run)
	if err != nil {
		return fmt.Errorf("%w: %w", dryexec.ErrBadAction, err)
	}
	run.Env = nil
	if err := t.Inner.Send(wire.KindReq, wire.VerbTrialRun, 2, &run); err != nil {
		return t.GuestErr("sending trial.run", err)
	}
	t.Sent, t.SentAt = true, time.Now()
	if err := sendStub(req); err != nil {
		return t.GuestErr("sending the command", err)
	}
	startIO()
	for {
		f, err := ReadFrame(t.Inner)
		if err != nil {
			return t.GuestErr("reading the report", err)
		}
		if len(f.Bin) > 0 {
			// Nothing the sandbox reports carries bulk bytes: a frame that
			// does (up to 64 MiB of them, each frame read whole) ends the
			// conversation at the first, not at the sandbox's pleasure.
			return fmt.Errorf("%w: %s %q with %d attachments", dryexec.ErrGuest, f.Kind, f.Verb, len(f.Bin))
		}
		switch f.Verb {
		case wire.VerbTrialExit:
			if t.Exit != nil {
				return fmt.Errorf("%w: trial.exit twice", dryexec.ErrGuest)
			}
			ex := new(wire.TrialExit)
			if err := f.Decode(ex); err != nil {
				return t.GuestErr("decoding trial.exit", err)
			}
			// The sandbox's word too: a VM on an image keeps its upper
			// dir on a drive of its own until its end. A false "full"
			// only adds a violation against the trial.
			t.UpperFull = t.UpperFull || ex.UpperFull || UpperFull(t.ScratchFD)
			t.Exit = ex
			t.trace("exit")
		case wire.VerbTrialDone:
			if t.Exit == nil {
				return fmt.Errorf("%w: trial.done before trial.exit", dryexec.ErrGuest)
			}
			done := new(wire.TrialDone)
			if err := f.Decode(done); err != nil {
				return t.GuestErr("decoding trial.done", err)
			}
			t.Done = done
			return nil
		case wire.VerbVMAlive:
			// The vm guest's heartbeat: its rung watches for it.
		case wire.VerbTrialNode:
			if err := t.node(f); err != nil {
				return t.GuestErr("answering trial.node", err)
			}
		default:
			return fmt.Errorf("%w: unexpected %s %q", dryexec.ErrGuest, f.Kind, f.Verb)
		}
	}
}

// node answers the sandbox's request f to make or chmod a FIFO
// (NodeInView): the errno its call gets, EPERM where the host has no view.
func (t *Trial) node(f *wire.Frame) error {
	var req wire.TrialNode
	var res wire.TrialNodeResult
	if f.Kind != wire.KindReq || f.Decode(&req) != nil {
		res.Errno = int(unix.EINVAL)
	} else {
		res.Errno = int(t.nodeInView(&req))
	}
	return t.Inner.Send(wire.KindResp, wire.VerbTrialNode, f.ID, &res)
}

// maxViewNodes bounds the FIFOs one trial has the host make. Each is an
// inode of the scratch tmpfs, whose size bounds data only, and one this
// process makes is charged to its own memory cgroup, not the sandbox's:
// unbounded, a VM asking in a loop would grow the host's kernel memory
// outside every limit of its trial.
const maxViewNodes = 1 << 14

// nodeInView is NodeInView through t's view, ENOSPC past maxViewNodes
// FIFOs, EPERM where the host has no view.
func (t *Trial) nodeInView(req *wire.TrialNode) unix.Errno {
	if t.ViewRoot == nil {
		return unix.EPERM
	}
	if req.Op == wire.NodeMknod && t.nodesMade >= maxViewNodes {
		return unix.ENOSPC
	}
	en := NodeInView(int(t.ViewRoot.Fd()), req)
	if req.Op == wire.NodeMknod && en == 0 {
		t.nodesMade++
	}
	return en
}

// Report walks the upper dirs and completes d, which the rung started
// (what its own containment saw: limits, network); cause is why the
// sandbox's own report is missing or cut short (nil: it is complete), and
// more are warnings the rung adds after the masks'. The sandbox is gone:
// nothing writes in the upper dirs any more.
func (t *Trial) Report(ctx context.Context, cause error, d *dryexec.StateDelta, more ...string) (*dryexec.StateDelta, error) {
	a := t.Spec.Action
	d.TrialID, d.Rung, d.Action = t.Spec.TrialID, t.Rung, a
	d.Violations = append(d.Violations, t.Watch.Check()...)
	if w := t.Watch.Warning(); w != "" {
		d.Warnings = append(d.Warnings, w)
	}
	end := time.Now()
	deadline := (&linuxns.Rung{CollectMin: t.CollectMin, CollectTimeout: t.CollectTimeout}).CollectDeadline(a, t.SentAt, end)
	why := t.makeNodes()
	werr := t.walk(ctx, deadline, d)
	var se *fsdelta.StoreError
	if errors.As(werr, &se) {
		return nil, fmt.Errorf("trial %s: %w", t.Spec.TrialID, werr)
	}
	if cause != nil {
		why = append(why, fmt.Sprintf("%s failed mid-trial (%v)", t.What, cause))
	}
	if werr != nil {
		why = append(why, fmt.Sprintf("the host's walk of the upper dirs failed (%v): the files listed are those walked before", werr))
	}
	d.Memory.Method = "none"
	p := &d.Process
	if ex := t.Exit; ex != nil {
		p.ExitCode, p.Signal, p.TimedOut, p.DurationNS = ex.ExitCode, ex.Signal, ex.TimedOut, ex.DurationNS
		if ex.StartError != "" {
			t.Errb.Write([]byte("dryexec: " + ex.StartError + "\n"))
		}
	} else {
		p.ExitCode = -1
		p.DurationNS = int64(end.Sub(t.SentAt))
		why = append(why, "the command's exit status is unknown (exit_code -1), and so are its CPU time and memory")
	}
	if dn := t.Done; dn != nil {
		p.CPUUserNS, p.CPUSysNS, p.PeakRSSBytes = dn.CPUUserNS, dn.CPUSysNS, dn.MaxRSS
		d.Memory.PeakRSSBytes = dn.MaxRSS
	}
	if t.UpperFull || UpperFull(t.ScratchFD) {
		d.Violations = append(d.Violations, dryexec.Violation{Kind: "limit",
			Detail: fmt.Sprintf("upper storage full: the trial may write at most %d bytes (--upper-size)", t.Spec.UpperSizeBytes)})
	}
	d.Warnings = append(d.Warnings, more...)
	if len(why) > 0 {
		d.Incomplete = true
		d.IncompleteReason = strings.Join(why, "; ")
		if t.Log != nil {
			t.Log.Warn("trial incomplete", "trial", t.Spec.TrialID, "reason", d.IncompleteReason)
		}
	}
	if t.Crossed != "" {
		d.Incomplete = true
		d.IncompleteReason = strings.TrimPrefix(d.IncompleteReason+"; "+t.Crossed, "; ")
	}
	if t.Expired {
		d.Incomplete = true
		msg := fmt.Sprintf("the trial ran out of time to collect what it wrote (%s after the command's start): "+
			"files past it are listed with their size, without their content", deadline.Sub(t.SentAt).Round(time.Millisecond))
		d.IncompleteReason = strings.TrimPrefix(d.IncompleteReason+"; "+msg, "; ")
	}
	t.Pipes.Wait()
	out, otr := t.Out.Bytes()
	errb, etr := t.Errb.Bytes()
	p.Stdout, p.StdoutTruncated = string(out), otr
	p.Stderr, p.StderrTruncated = string(errb), etr
	d.Normalize()
	d.ComputeTotals()
	t.trace("done")
	return d, nil
}

// walk walks every upper dir through the host's handle on the scratch
// tmpfs and diffs it with the host into d (its files, which may be spilled
// to Spec.SpillDir, and its touched paths), as the ns rung's host diffs a
// guest's report. The walk runs in this process: the upper dirs are on the
// host side of the sandbox, and fswalk.Walk passes the kernel one name at a
// time relative to a directory fd, never following a link the sandbox made.
// After a walk error, d holds what was walked before it.
func (t *Trial) walk(ctx context.Context, deadline time.Time, d *dryexec.StateDelta) error {
	var err error
	t.Expired, t.Crossed, err = fsdelta.DiffScratch(ctx, fsdelta.Scratch{FD: t.ScratchFD, Uppers: t.Uppers,
		Hidden: append(slices.Clone(t.Cover.Masks), t.Cover.Hidden...), Deadline: deadline}, t.Spec, d)
	return err
}
