//go:build unix

package guest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dryexec/dryexec/internal/tail"
	"github.com/dryexec/dryexec/wire"
)

const oNoFollow = syscall.O_NOFOLLOW

// shellState is what survives from one exec_shell to the next.
type shellState struct {
	cwd string
	env []string
	// dropped holds the warnings for variables the last exec exported but which
	// were too large to keep; the next exec (the first without them) reports them.
	dropped []string
}

// Environment limits: the kernel refuses an execve whose single string exceeds
// MAX_ARG_STRLEN (32 pages), so a larger variable would break every later exec;
// it is dropped alone, with a warning.
const (
	maxEnvVar   = 128 << 10
	maxEnvTotal = 1 << 20
)

// shellWrapper runs the command with `eval` in a shell that first goes to the
// saved cwd, and on any exit (also a failure, also an explicit `exit`) writes to
// fd 3: the names of exported variables too large for execve (which it unexports,
// since while they are exported no program can be started, `env` included), a
// newline, its cwd (the workspace if the cwd was removed), NUL, and its exported
// environment, NUL-separated, closed by an end mark. Only builtins run before
// `env -0`; when it cannot run (the pids limit is reached by the command's own
// background processes) the end mark is missing and the previous environment
// stands rather than an empty one.
const shellWrapper = `__dx_save() { __dx_rc=$?
__dx_big=$(export -p | while IFS= read -r __dx_l; do case $__dx_l in "export "*=*) __dx_n=${__dx_l#export }; __dx_n=${__dx_n%%=*}; eval "__dx_v=\${$__dx_n-}"; [ ${#__dx_v} -gt 131000 ] && printf '%s ' "$__dx_n";; esac; done)
for __dx_n in $__dx_big; do unset "$__dx_n"; done
{ printf '%s\n' "$__dx_big"; pwd -P 2>/dev/null || printf '%s\n' "$__dx_ws"; printf '\0'; env -0 && printf '=dryexec-env-end\0'; } >&3 2>/dev/null
exit $__dx_rc; }
trap __dx_save EXIT
__dx_ws=$2
{ [ -n "$1" ] && cd -- "$1"; } 2>/dev/null || cd -- "$2" || exit 126
__dx_cmd=$3
set --
eval "$__dx_cmd"`

// boundedEnv drops variables the kernel would refuse and says which.
func boundedEnv(env []string) ([]string, []string) {
	var out, warnings []string
	total := 0
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case len(kv)+1 > maxEnvVar:
			warnings = append(warnings, fmt.Sprintf("environment variable %s dropped: %d bytes is more than the %d an exec allows", k, len(kv), maxEnvVar))
			continue
		case total+len(kv)+1 > maxEnvTotal:
			warnings = append(warnings, fmt.Sprintf("environment variable %s dropped: the environment would exceed %d bytes", k, maxEnvTotal))
			continue
		}
		total += len(kv) + 1
		out = append(out, kv)
	}
	return out, warnings
}

// envEnd closes a complete environment listing (shellWrapper prints it
// literally). It is not a valid NAME=value entry, so no variable can forge it.
const envEnd = "=dryexec-env-end"

// parseState reads what the wrapper wrote: dropped names, newline, cwd, NUL,
// then NUL-separated env and the end mark. envOK is false when the listing is
// incomplete, and env is then nil.
func parseState(b []byte) (dropped []string, cwd string, env []string, envOK, ok bool) {
	big, b, ok := bytes.Cut(b, []byte{'\n'})
	if !ok {
		return nil, "", nil, false, false
	}
	dropped = strings.Fields(string(big))
	c, rest, ok := bytes.Cut(b, []byte{0})
	if !ok {
		return nil, "", nil, false, false
	}
	cwd = strings.TrimSuffix(string(c), "\n")
	rest, envOK = bytes.CutSuffix(rest, []byte(envEnd+"\x00"))
	if !envOK {
		return dropped, cwd, nil, false, true
	}
	for _, kv := range bytes.Split(rest, []byte{0}) {
		s := string(kv)
		k, _, ok := strings.Cut(s, "=")
		if !ok || k == "" || k == "SHLVL" || k == "_" {
			continue
		}
		env = append(env, s)
	}
	sort.Strings(env)
	return dropped, cwd, env, true, true
}

// transcript merges stdout and stderr in the order they arrive, bounded.
type transcript struct {
	mu  sync.Mutex
	all *tail.Buffer
}

type streamWriter struct {
	t   *transcript
	own *tail.Buffer
}

func (w streamWriter) Write(p []byte) (int, error) {
	w.t.mu.Lock()
	w.t.all.Write(p)
	w.t.mu.Unlock()
	return w.own.Write(p)
}

// execShell runs one command and updates the session's cwd and env from it.
func (s *session) execShell(ctx context.Context, req *wire.ExecShell) *wire.ShellResult {
	res := &wire.ShellResult{}
	env, warnings := boundedEnv(s.shell.env)
	res.Warnings = append(s.shell.dropped, warnings...)
	s.shell.dropped = nil
	stateR, stateW, err := os.Pipe()
	if err != nil {
		res.ExitCode, res.Stderr = 126, err.Error()
		return res
	}
	defer stateR.Close()
	cap := s.cfg.OutputCap
	t := &transcript{all: tail.New(cap)}
	out, errb := tail.New(cap), tail.New(cap)
	cmd := exec.Command("/bin/sh", "-c", shellWrapper, "sh", s.shell.cwd, s.ws, req.Command)
	cmd.Env = env
	cmd.Stdin = nil
	cmd.Stdout = streamWriter{t, out}
	cmd.Stderr = streamWriter{t, errb}
	cmd.ExtraFiles = []*os.File{stateW}
	cmd.SysProcAttr = s.execAttr()
	// Background jobs may keep the output pipes open after the shell exits; the
	// exec does not wait for them past this.
	cmd.WaitDelay = 100 * time.Millisecond
	start := time.Now()
	if err := s.startExec(cmd); err != nil {
		stateW.Close()
		res.ExitCode, res.Stderr, res.Transcript = 126, "dryexec: "+err.Error()+"\n", "dryexec: "+err.Error()+"\n"
		return res
	}
	stateW.Close()
	s.announce(cmd.Process.Pid)
	var state []byte
	stateDone := make(chan struct{})
	go func() {
		state, _ = io.ReadAll(io.LimitReader(stateR, maxEnvTotal+1<<16))
		close(stateDone)
	}()
	var timeout <-chan time.Time
	if req.TimeoutMS > 0 {
		timer := time.NewTimer(time.Duration(req.TimeoutMS) * time.Millisecond)
		defer timer.Stop()
		timeout = timer.C
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var werr error
	select {
	case werr = <-waited:
	case <-timeout:
		res.TimedOut = true
		killGroup(cmd.Process.Pid)
		werr = <-waited
	case <-ctx.Done():
		killGroup(cmd.Process.Pid)
		werr = <-waited
	}
	// Whatever the command left behind in its group goes with it.
	killGroup(cmd.Process.Pid)
	s.reapOrphans()
	res.DurationNS = time.Since(start).Nanoseconds()
	switch {
	case res.TimedOut:
		res.ExitCode = 124
	case cmd.ProcessState != nil:
		res.ExitCode = cmd.ProcessState.ExitCode()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.ExitCode = 128 + int(ws.Signal())
		}
	default:
		res.ExitCode = 126
		res.Warnings = append(res.Warnings, fmt.Sprintf("waiting for the shell: %v", werr))
	}
	select {
	case <-stateDone:
	case <-time.After(100 * time.Millisecond):
		// A background job inherited fd 3 and keeps it open: take what we have.
		stateR.Close()
		<-stateDone
	}
	if !res.TimedOut {
		if dropped, cwd, newEnv, envOK, ok := parseState(state); ok {
			if cwd == "" {
				cwd = s.ws
			}
			s.shell.cwd = cwd
			if envOK {
				s.shell.env = newEnv
			} else {
				res.Warnings = append(res.Warnings, "the shell's environment could not be read after this command (no process could be started: is the pids limit reached?); the previous environment is kept")
			}
			for _, k := range dropped {
				s.shell.dropped = append(s.shell.dropped, fmt.Sprintf("environment variable %s dropped: more than the %d bytes an exec allows", k, maxEnvVar))
			}
		}
	}
	res.Cwd = s.shell.cwd
	res.Violations = s.takeViolations()
	tb, ttr := t.all.Bytes()
	ob, otr := out.Bytes()
	eb, etr := errb.Bytes()
	res.Transcript, res.Stdout, res.Stderr = string(tb), string(ob), string(eb)
	res.Truncated = ttr || otr || etr
	return res
}

func killGroup(pid int) { syscall.Kill(-pid, syscall.SIGKILL) }

func pythonPath() string {
	for _, p := range []string{"/usr/bin/python3", "/usr/local/bin/python3"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	if p, err := exec.LookPath("python3"); err == nil {
		return p
	}
	return ""
}

// announce tells the host, on the host rung, which process leads the exec's
// session, so that it can be killed if the guest dies mid-exec.
func (s *session) announce(pid int) {
	if s.cfg.Rung == "host" && s.peer != nil {
		s.peer.Notify(wire.VerbExecStarted, &wire.ExecStarted{PID: pid})
	}
}
