//go:build unix

package guest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/dryexec/dryexec/internal/tail"
)

// The pre-started runner ("zygote"). Starting python3 with the runner costs
// most of an exec_python round trip, so after each exec_python (and at session
// start, and after reset and push_tree) the guest starts the next call's runner
// ahead of time, exactly as it would for a call: same binary and flags, from the
// launcher thread, in its own process group, with the same fds and the shell's
// exported environment. It runs its startup, says it is ready, and blocks on its
// request pipe. A call may use it only if everything its startup depended on
// still holds (takeRunner, unchanged); otherwise it is killed and the call
// starts a fresh runner. A runner serves one call and is gone after it.

// ctimeSlack: file timestamps come from the kernel's coarse clock, which lags
// time.Now by up to a tick, so a change made after a runner started has a ctime
// no earlier than its start minus this. A change made in the slack before it
// counts as a change after it (the runner is not used): that costs only speed.
const ctimeSlack = 50 * time.Millisecond

// Bounds on the ready message (a few dozen paths, usually): the runner is the
// user's process.
const (
	readyLineMax  = 4 << 20
	readyPathsMax = 100_000
)

// runnerProc is one runner process, from its start to its end: pre-started, or
// started for a call. It serves at most one call.
type runnerProc struct {
	cmd   *exec.Cmd
	pid   int
	reqR  *os.File      // fd 3's read end (runner → guest)
	in    *bufio.Reader // over reqR; readReady owns it until ready is closed
	respW *os.File      // fd 4's write end (guest → runner)
	out   *tail.Buffer  // its stdout and stderr: the transcript
	// started is taken before the process is: anything its startup read and
	// that changed since has a later ctime.
	started time.Time

	// exited is closed when cmd.Wait returned (waitErr its error).
	exited  chan struct{}
	waitErr error
	// ready is closed once the runner's first line was read: readyMsg, or
	// readyErr when it ended or broke protocol first.
	ready    chan struct{}
	readyMsg *runnerReady
	readyErr error

	// What it was started with; a call must match all of it.
	py, dir string
	env     []string
}

// runnerReady is the runner's first message: the paths its startup depended on,
// as it found them.
type runnerReady struct {
	Op      string   `json:"op"`
	Present []string `json:"present"`
	Absent  []string `json:"absent"`
}

// startRunner starts a runner (it then waits for its request): py with the
// embedded runner, environment env, in dir.
func (s *session) startRunner(py string, env []string, dir string) (*runnerProc, error) {
	reqR, reqW, err := os.Pipe() // runner → guest: the runner's fd 3
	if err != nil {
		return nil, err
	}
	respR, respW, err := os.Pipe() // guest → runner: the runner's fd 4
	if err != nil {
		reqR.Close()
		reqW.Close()
		return nil, err
	}
	// One writer for stdout and stderr: exec.Cmd then gives both the same
	// pipe, so the transcript is in exactly the order the runner wrote.
	out := tail.New(s.cfg.OutputCap)
	cmd := s.command(py, "-B", "-u", "-c", pyRunner)
	cmd.Env = env
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.ExtraFiles = []*os.File{reqW, respR}
	cmd.SysProcAttr = runnerAttr(s.execAttr())
	cmd.WaitDelay = 100 * time.Millisecond
	r := &runnerProc{cmd: cmd, reqR: reqR, in: bufio.NewReaderSize(reqR, 64<<10), respW: respW, out: out,
		started: time.Now(), exited: make(chan struct{}), ready: make(chan struct{}), py: py, dir: dir, env: env}
	err = s.startExec(cmd)
	reqW.Close()
	respR.Close()
	if err != nil {
		reqR.Close()
		respW.Close()
		return nil, err
	}
	r.pid = cmd.Process.Pid
	go func() {
		r.waitErr = cmd.Wait()
		close(r.exited)
	}()
	go r.readReady()
	return r, nil
}

// readReady reads the runner's first message.
func (r *runnerProc) readReady() {
	defer close(r.ready)
	line, err := readLine(r.in, readyLineMax)
	if err != nil {
		r.readyErr = err
		return
	}
	var m runnerReady
	if err := json.Unmarshal(line, &m); err != nil || m.Op != "ready" {
		r.readyErr = fmt.Errorf("the runner's first message is not \"ready\": %.100q", line)
		return
	}
	if len(m.Present)+len(m.Absent) > readyPathsMax {
		r.readyErr = fmt.Errorf("the runner's ready message names more than %d paths", readyPathsMax)
		return
	}
	r.readyMsg = &m
}

// discard kills a runner that will serve no call, and waits for it.
func (r *runnerProc) discard(s *session) {
	if r.alive() {
		killGroup(r.pid)
	} // else reaped already: its pid may belong to someone else by now
	r.reqR.Close()
	r.respW.Close()
	<-r.exited
	<-r.ready
	s.reapOrphans()
}

// alive reports whether the runner has not exited (a command may have killed
// it while it waited).
func (r *runnerProc) alive() bool {
	select {
	case <-r.exited:
		return false
	default:
	}
	// cmd.Wait closes exited a moment after it has reaped the runner (it
	// closes the pipes and waits for their copiers first): a runner killed
	// just before a call may be gone already, and taking it would fail the
	// call with a crash it never had.
	return syscall.Kill(r.pid, 0) != syscall.ESRCH
}

// unchanged reports whether a ready runner may serve a call: every path its
// startup found is still there and unchanged since it started (ctime: no
// write, rename, chmod or new entry), every path it did not find is still
// missing. The paths come from the user's process: they only decide whether
// it is reused, and paths into /proc (where the guest's own fds are) are not
// looked at.
func (r *runnerProc) unchanged() bool {
	m := r.readyMsg
	if r.readyErr != nil || m == nil {
		return false
	}
	limit := r.started.Add(-ctimeSlack).UnixNano()
	for _, p := range m.Present {
		if !depPath(p) {
			return false
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return false
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || ctimeNS(st) >= limit {
			return false
		}
	}
	for _, p := range m.Absent {
		if !depPath(p) {
			return false
		}
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			return false
		}
	}
	return true
}

func depPath(p string) bool {
	return filepath.IsAbs(p) && p != "/proc" && !strings.HasPrefix(p, "/proc/")
}

// runnerDir is where a runner starts. Normally "/", so that a waiting runner
// holds nothing in the workspace (which reset, rebase and push remount) and its
// startup does not depend on the cwd, which the call then sets. But relative
// entries in these variables are resolved against the cwd at startup: then it
// starts in the call's cwd, as it always did, and is never pre-started.
func runnerDir(env []string, cwd string) string {
	if startupNeedsCwd(env) {
		return cwd
	}
	return "/"
}

// cwdVars are the variables whose relative paths python resolves at startup.
var cwdVars = []string{"PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONPYCACHEPREFIX", "PYTHONEXECUTABLE"}

func startupNeedsCwd(env []string) bool {
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if v == "" || !slices.Contains(cwdVars, k) {
			continue
		}
		for _, p := range strings.Split(v, ":") {
			if !strings.HasPrefix(p, "/") {
				return true
			}
		}
	}
	return false
}

// prestartPython starts the runner for the next call, unless one is waiting,
// the session is closing, or the next call's runner could not be pre-started
// (no python, a cwd-dependent startup). A runner that fails to start is not an
// error here: the call will start its own and say why.
//
// The start itself (fork and exec, about a millisecond) runs in the background,
// so that the answer to the request that called this goes out meanwhile; every
// request waits for it first (awaitPrestart), so each sees the runner exactly
// as if it had been started in line.
func (s *session) prestartPython() {
	s.awaitPrestart()
	if s.runner != nil || s.pyClosed || !s.pyUsed {
		return
	}
	py := pythonPath()
	if py == "" {
		return
	}
	env, _ := boundedEnv(s.shell.env)
	if startupNeedsCwd(env) {
		return
	}
	started := make(chan *runnerProc, 1)
	s.prestarting = started
	go func() {
		r, err := s.startRunner(py, env, "/")
		if err != nil {
			r = nil
		}
		started <- r
	}()
}

// awaitPrestart waits for a runner being pre-started and makes it the waiting
// one. s.mu is held.
func (s *session) awaitPrestart() {
	if s.prestarting != nil {
		s.runner = <-s.prestarting
		s.prestarting = nil
	}
}

// takeRunner hands the waiting runner to a call if it was started with what
// the call would start one with; otherwise it kills it and returns nil. Its
// readiness and its startup's files are checked after (unchanged).
func (s *session) takeRunner(py string, env []string, dir string, fresh bool) *runnerProc {
	s.awaitPrestart()
	r := s.runner
	s.runner = nil
	if r == nil {
		return nil
	}
	if fresh || r.py != py || r.dir != dir || !slices.Equal(withoutCwdVars(r.env), withoutCwdVars(env)) {
		r.discard(s)
		return nil
	}
	return r
}

// shellDirVars change with every `cd` and are read by nothing at the
// interpreter's startup: a waiting runner started with other values is
// still the call's, and gets the call's values with its request
// (envChanges).
var shellDirVars = []string{"PWD", "OLDPWD"}

func withoutCwdVars(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(shellDirVars, k)
	})
}

// envChanges are what of shellDirVars a runner started with from must change to
// be started with to: values to set, names to unset.
func envChanges(from, to []string) (set map[string]string, unset []string) {
	lookup := func(env []string, k string) (string, bool) {
		for _, kv := range env {
			if name, v, _ := strings.Cut(kv, "="); name == k {
				return v, true
			}
		}
		return "", false
	}
	for _, k := range shellDirVars {
		fv, fok := lookup(from, k)
		tv, tok := lookup(to, k)
		switch {
		case tok && (!fok || fv != tv):
			if set == nil {
				set = map[string]string{}
			}
			set[k] = tv
		case fok && !tok:
			unset = append(unset, k)
		}
	}
	return set, unset
}

// dropRunner kills the waiting runner, if any.
func (s *session) dropRunner() {
	s.awaitPrestart()
	if s.runner != nil {
		s.runner.discard(s)
		s.runner = nil
	}
}

// closePython kills the waiting runner and starts no other.
func (s *session) closePython() {
	s.pyClosed = true
	s.dropRunner()
}
