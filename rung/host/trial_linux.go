package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/fsdelta"
	"github.com/dryexec/dryexec/internal/tail"
	"github.com/dryexec/dryexec/rung/linuxns"
)

// Trial implements dryexec.Rung: the command runs, unconfined, in a scratch
// copy of its working directory (owners, modes, mtimes, symlinks, fifos and
// hard links kept); the delta is that copy's changes against the original,
// through the same Differ the ns rung feeds from its guest. It says "no
// isolation" in its warnings, always. What the command does outside the
// copy (an absolute path, a network connection, a process it detaches) is
// done on the host for real and is in no delta; a --net spec is refused,
// since nothing could keep that promise.
func (r *Rung) Trial(ctx context.Context, spec dryexec.TrialSpec) (*dryexec.StateDelta, error) {
	spec = spec.WithDefaults()
	if err := linuxns.CheckAction(spec.Action); err != nil {
		return nil, err
	}
	if len(spec.Net) > 0 {
		return nil, &dryexec.IsolationUnavailableError{Rung: Name, Missing: "network interception (the host rung shares the host's network: --net cannot be honoured, not even none; use the ns rung)"}
	}
	if spec.TrialID == "" {
		spec.TrialID = dryexec.NewTrialID()
	}
	scratch, err := os.MkdirTemp("", "dryexec-host-"+spec.TrialID+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)
	orig := filepath.Clean(spec.Action.Cwd)
	root := filepath.Join(scratch, "w")
	cp, err := copyTree(orig, root)
	if err != nil {
		return nil, fmt.Errorf("host rung: copying %s: %w", orig, err)
	}
	// Everything the command changes in the copy has a ctime from since on
	// (the kernel sets it on every write, chmod, rename and link; no call
	// sets it back): the walk compares nothing older with the host.
	since, err := fsTick(scratch)
	if err != nil {
		return nil, err
	}
	d := &dryexec.StateDelta{TrialID: spec.TrialID, Rung: Name, Action: spec.Action}
	d.Warnings = append(d.Warnings, NoIsolation)
	d.Warnings = append(d.Warnings, cp.warnings...)
	if err := run(ctx, spec, root, d); err != nil {
		return nil, err
	}
	differ := fsdelta.NewDiffer([]fsdelta.Mount{{Path: orig}}, spec.Blobs, spec.DiffMaxBytes)
	defer differ.Close()
	if spec.SpillDir != "" {
		differ.SpillTo(spec.SpillDir, 0)
	}
	w := &walker{root: root, orig: orig, since: since, skip: cp.skip, differ: differ}
	if err := w.dir("", false); err != nil {
		return nil, err
	}
	if err := differ.FinishDelta(d); err != nil {
		return nil, err
	}
	d.Memory.Method = "none"
	d.Memory.PeakRSSBytes = d.Process.PeakRSSBytes
	d.Normalize()
	d.ComputeTotals()
	return d, nil
}

// run runs spec's command in dir, in a session of its own, and fills d's
// Process. Once the command has ended (or timed out) everything left in its
// session is killed; a process that left the session survives: there is no
// boundary to stop it.
func run(ctx context.Context, spec dryexec.TrialSpec, dir string, d *dryexec.StateDelta) error {
	a := spec.Action
	env := make([]string, 0, len(a.Env))
	for k, v := range a.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	out, errb := tail.New(spec.OutputCap), tail.New(spec.OutputCap)
	p := &d.Process
	defer func() {
		o, otr := out.Bytes()
		e, etr := errb.Bytes()
		p.Stdout, p.StdoutTruncated, p.Stderr, p.StderrTruncated = string(o), otr, string(e), etr
	}()
	path, err := lookPath(a.Argv[0], a.Env["PATH"], dir)
	if err != nil {
		// As a shell reports it: 127 not found, 126 not executable.
		p.ExitCode = 127
		if errors.Is(err, fs.ErrPermission) {
			p.ExitCode = 126
		}
		fmt.Fprintf(errb, "dryexec: %s: %v\n", a.Argv[0], err)
		return nil
	}
	// Pipes of our own, not exec's copiers: Wait would wait for every
	// holder of the write ends, a backgrounded process included.
	or, ow, err := os.Pipe()
	if err != nil {
		return err
	}
	er, ew, err := os.Pipe()
	if err != nil {
		or.Close()
		ow.Close()
		return err
	}
	cmd := &exec.Cmd{Path: path, Args: a.Argv, Env: env, Dir: dir, Stdin: spec.Stdin, Stdout: ow, Stderr: ew,
		SysProcAttr: &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}}
	var copies sync.WaitGroup
	for _, c := range []struct {
		r *os.File
		w io.Writer
	}{{or, out.Tee(spec.Stdout)}, {er, errb.Tee(spec.Stderr)}} {
		copies.Add(1)
		go func() {
			defer copies.Done()
			io.Copy(c.w, c.r)
			c.r.Close()
		}()
	}
	start := time.Now()
	err = cmd.Start()
	ow.Close()
	ew.Close()
	if err != nil {
		copies.Wait()
		p.ExitCode = 126
		fmt.Fprintf(errb, "dryexec: %s: %v\n", a.Argv[0], err)
		return nil
	}
	var timedOut bool
	stop := make(chan struct{})
	go func() {
		var timeout <-chan time.Time
		if a.TimeoutMS > 0 {
			t := time.NewTimer(a.Timeout())
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-timeout:
			timedOut = true
			killSession(cmd.Process.Pid)
		case <-ctx.Done():
			killSession(cmd.Process.Pid)
		case <-stop:
		}
	}()
	werr := cmd.Wait()
	p.DurationNS = int64(time.Since(start))
	close(stop)
	// Nothing the command started may go on writing to the copy while it
	// is walked.
	killSession(cmd.Process.Pid)
	copies.Wait()
	st := cmd.ProcessState
	if st == nil {
		return werr
	}
	if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
		p.CPUUserNS, p.CPUSysNS = syscall.TimevalToNsec(ru.Utime), syscall.TimevalToNsec(ru.Stime)
		p.PeakRSSBytes = ru.Maxrss << 10
	}
	ws := st.Sys().(syscall.WaitStatus)
	switch {
	case timedOut:
		p.ExitCode, p.Signal, p.TimedOut = 124, "SIGKILL", true
	case ws.Signaled():
		p.ExitCode, p.Signal = 128+int(ws.Signal()), unix.SignalName(ws.Signal())
	default:
		p.ExitCode = ws.ExitStatus()
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return nil
}

// lookPath finds name as a shell would with the action's PATH (not ours):
// a name with a slash is taken as it is, relative to dir.
func lookPath(name, pathEnv, dir string) (string, error) {
	check := func(p string) error {
		full := p
		if !filepath.IsAbs(full) {
			full = filepath.Join(dir, p)
		}
		st, err := os.Stat(full)
		if err != nil {
			return err
		}
		if st.IsDir() || unix.Access(full, unix.X_OK) != nil {
			return fs.ErrPermission
		}
		return nil
	}
	if strings.Contains(name, "/") {
		return name, check(name)
	}
	if pathEnv == "" {
		pathEnv = "/usr/local/bin:/usr/bin:/bin"
	}
	denied := false
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, name)
		switch err := check(p); {
		case err == nil:
			if !filepath.IsAbs(p) {
				p = "./" + p
			}
			return p, nil
		case errors.Is(err, fs.ErrPermission):
			denied = true
		}
	}
	if denied {
		return "", fs.ErrPermission
	}
	return "", errors.New("command not found")
}

// fsNow is the filesystem's clock at dir: the ctime of a file made there
// now. (The kernel stamps ctimes from a coarse clock: read back, it is the
// same clock the command's changes will be stamped with.)
func fsNow(dir string) (unix.Timespec, error) {
	f, err := os.CreateTemp(dir, ".now-")
	if err != nil {
		return unix.Timespec{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return unix.Timespec{}, err
	}
	return st.Ctim, nil
}

// fsTick waits until the filesystem clock at dir has moved past the copy
// just made and returns its time then. The kernel stamps ctimes from a
// coarse clock (one tick is 1–10 ms): what the copy made in its last tick
// has the ctime of a change the command makes in the same tick, and a hard
// link the copy made, reported as changed, would be a change of identity
// the Differ cannot tell from a real one. At most one tick of waiting.
func fsTick(dir string) (unix.Timespec, error) {
	done, err := fsNow(dir)
	if err != nil {
		return done, err
	}
	for {
		now, err := fsNow(dir)
		if err != nil || !notBefore(done, now) {
			return now, err
		}
		time.Sleep(200 * time.Microsecond)
	}
}

func notBefore(t, since unix.Timespec) bool {
	return t.Sec > since.Sec || t.Sec == since.Sec && t.Nsec >= since.Nsec
}
