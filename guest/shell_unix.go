//go:build unix

package guest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	path string // the shell's binary (resolveShell)
	cwd  string
	env  []string
	// dropped holds the warnings for variables the last exec exported but which
	// were too large to keep; the next exec (the first without them) reports them.
	dropped []string
	// probed is set once an exec has compared the shell's `export -p` with its
	// `env -0`; exportP is set when they agreed, and later execs then read the
	// environment from `export -p` alone (shellWrapperFast).
	probed, exportP bool
}

// Environment limits: the kernel refuses an execve whose single string exceeds
// MAX_ARG_STRLEN (32 pages), so a larger variable would break every later exec;
// it is dropped alone, with a warning.
const (
	maxEnvVar   = 128 << 10
	maxEnvTotal = 1 << 20
	// maxEnvValue is the value length above which the exec's shell drops a
	// variable (the wrapper's test, kept byte for byte in exportPState).
	maxEnvValue = 131000
)

// shellWrapper runs the command with `eval` in a shell that first goes to the
// saved cwd, and on any exit (also a failure, also an explicit `exit`) writes to
// fd 3: the names of exported variables too large for execve (which it unexports,
// since while they are exported no program can be started, `env` included: the
// list is cut at its spaces by parameter expansion, not by the command's IFS), a
// newline, its cwd (the workspace if the cwd was removed), NUL, and its exported
// environment, NUL-separated, closed by an end mark. Only builtins run before
// `env -0`; when it cannot run (the pids limit is reached by the command's own
// background processes) the end mark is missing and the previous environment
// stands rather than an empty one. It first turns off `set -e` and `set -u`,
// which the command may have left on (options are not part of what is saved):
// under them the save stopped at its first false test or unset name, and the
// exec's cwd and environment were lost. bash (4.4 on) finds the large variables
// without starting anything: every variable's name ("${!A@}" … "${!_@}") and,
// if it is set, its attributes (x for exported), each read through ${!name…}
// so that a command's `set -u` does not stop the save at a variable exported
// without a value (bash's own OLDPWD), instead of reading `export -p`
// line by line, for which its `read` takes a pipe one byte per system call:
// that loop was ≈ 16 ms of a 38 ms `exec_shell("true")` on a nested VM, and
// listing `compgen -e` in a command substitution (two forks) ≈ 2 ms more than
// this. The eval keeps the bash-only syntax from other shells' parsers.
//
// On a session's first exec (probe set) it then also exports __dx_probe, a
// value made of what quoting can get wrong, before `env -0`, and after the end
// mark writes whether the shell is bash or zsh, and its `export -p` closed by
// the end mark and a newline: probeState decides from that whether the later
// execs may use shellWrapperFast.
const shellWrapper = `__dx_save() { __dx_rc=$?; set +eu
if [ -n "${BASH_VERSION-}" ] && eval '[ "${BASH_VERSINFO[0]}${BASH_VERSINFO[1]}" -ge 44 ]' 2>/dev/null; then __dx_big=; eval 'for __dx_n in "${!A@}" "${!B@}" "${!C@}" "${!D@}" "${!E@}" "${!F@}" "${!G@}" "${!H@}" "${!I@}" "${!J@}" "${!K@}" "${!L@}" "${!M@}" "${!N@}" "${!O@}" "${!P@}" "${!Q@}" "${!R@}" "${!S@}" "${!T@}" "${!U@}" "${!V@}" "${!W@}" "${!X@}" "${!Y@}" "${!Z@}" "${!a@}" "${!b@}" "${!c@}" "${!d@}" "${!e@}" "${!f@}" "${!g@}" "${!h@}" "${!i@}" "${!j@}" "${!k@}" "${!l@}" "${!m@}" "${!n@}" "${!o@}" "${!p@}" "${!q@}" "${!r@}" "${!s@}" "${!t@}" "${!u@}" "${!v@}" "${!w@}" "${!x@}" "${!y@}" "${!z@}" "${!_@}"; do case ${!__dx_n+x} in x) case ${!__dx_n@a} in *x*) __dx_v=${!__dx_n}; if [ ${#__dx_v} -gt 131000 ]; then __dx_big="$__dx_big$__dx_n "; fi;; esac;; esac; done'
else __dx_big=$(export -p | while IFS= read -r __dx_l; do case $__dx_l in "export "*=*|"declare -x "*=*) __dx_n=${__dx_l#export }; __dx_n=${__dx_n#declare -x }; __dx_n=${__dx_n%%=*}; eval "__dx_v=\${$__dx_n-}"; [ ${#__dx_v} -gt 131000 ] && printf '%s ' "$__dx_n";; esac; done); fi
__dx_r=$__dx_big; while [ -n "$__dx_r" ]; do unset "${__dx_r%% *}"; __dx_r=${__dx_r#* }; done
[ -n "$__dx_p" ] && { __dx_probe=$__dx_p; export __dx_probe; }
{ printf '%s\n' "$__dx_big"; pwd -P 2>/dev/null || printf '%s\n' "$__dx_ws"; printf '\0'; env -0 && printf '=dryexec-env-end\0' && [ -n "$__dx_probe" ] && printf '%s\n' "${BASH_VERSION+bash}${ZSH_VERSION+zsh}" && export -p && printf '=dryexec-env-end\n'; } >&3 2>/dev/null
exit $__dx_rc; }
trap __dx_save EXIT
__dx_ws=$2
__dx_p=$4
{ [ -n "$1" ] && cd -- "$1"; } 2>/dev/null || cd -- "$2" || exit 126
__dx_cmd=$3
set --
eval "$__dx_cmd"`

// shellWrapperFast is shellWrapper without a process in its EXIT trap: it
// writes its cwd, NUL, and `export -p` (a builtin) closed by the end mark and
// a newline, which exportPState parses and bounds. The command substitution and
// pipeline that found the large variables (two forks) and `env -0` (a fork and
// an exec) cost about 1 ms of each exec on a nested VM. Since nothing is
// started, the pids limit cannot keep the environment from being read.
const shellWrapperFast = `__dx_save() { __dx_rc=$?; set +eu
{ pwd -P 2>/dev/null || printf '%s\n' "$__dx_ws"; printf '\0'; export -p; printf '=dryexec-env-end\n'; } >&3 2>/dev/null
exit $__dx_rc; }
trap __dx_save EXIT
__dx_ws=$2
{ [ -n "$1" ] && cd -- "$1"; } 2>/dev/null || cd -- "$2" || exit 126
__dx_cmd=$3
set --
eval "$__dx_cmd"`

// envProbe is the value the probing exec exports: newlines, every kind of
// quote, backslashes, expansions, `=`, a forged end mark and export line,
// control bytes, bytes that are not UTF-8, and a trailing newline. A shell whose
// `export -p` prints it in a form parseExportP does not read exactly (bash
// prints $'...' for control bytes) keeps the env -0 path.
const envProbe = "a\nb 'c' '\\'' \"d\" \\ \\\\n $HOME ${x} `e` $(f) = ==\t\x01\x1b\x7f\xff\xc3\x28 \n=dryexec-env-end\nexport Y='z'\n"

// exportPLimit bounds what the state pipe yields: `export -p` quotes a value,
// so its listing is up to five bytes per byte of value (a lone ' is '"'"').
const exportPLimit = 6*maxEnvTotal + 1<<16

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

// errExportP is a listing parseExportP cannot read exactly.
var errExportP = errors.New("unexpected export -p output")

// parseExportP reads `export -p` as a POSIX shell prints it (dash, busybox
// ash): lines `export NAME=WORD` or `export NAME` (exported, no value: not in
// the environment, skipped), up to a line that is the end mark, which must
// close the input. WORD is read as the shell would read it: '...' literally,
// "..." with \ escaping only $ ` " \ and newline, a backslash outside quotes
// escaping the next byte, plain bytes as they are. Anything else a shell could
// expand ($, `), an unquoted blank or a name that is not an identifier fails
// the whole listing rather than being guessed at. The names keep their order.
func parseExportP(b []byte) ([]string, error) {
	var env []string
	for {
		if rest, ok := bytes.CutPrefix(b, []byte(envEnd+"\n")); ok {
			if len(rest) != 0 {
				return nil, errExportP
			}
			return env, nil
		}
		rest, ok := bytes.CutPrefix(b, []byte("export "))
		if !ok {
			return nil, errExportP
		}
		n := 0
		for n < len(rest) && (rest[n] == '_' || 'a' <= rest[n]|0x20 && rest[n]|0x20 <= 'z' || n > 0 && '0' <= rest[n] && rest[n] <= '9') {
			n++
		}
		if n == 0 || n == len(rest) {
			return nil, errExportP
		}
		name := string(rest[:n])
		switch rest[n] {
		case '\n':
			b = rest[n+1:]
			continue
		case '=':
		default:
			return nil, errExportP
		}
		val, tail, err := shellWord(rest[n+1:])
		if err != nil {
			return nil, err
		}
		env = append(env, name+"="+val)
		b = tail
	}
}

// shellWord reads one word up to its unquoted newline and returns its value
// and what follows the newline.
func shellWord(b []byte) (string, []byte, error) {
	var v []byte
	for i := 0; i < len(b); i++ {
		switch c := b[i]; c {
		case '\n':
			return string(v), b[i+1:], nil
		case '\'':
			j := bytes.IndexByte(b[i+1:], '\'')
			if j < 0 {
				return "", nil, errExportP
			}
			v = append(v, b[i+1:i+1+j]...)
			i += 1 + j
		case '"':
			i++
			for ; i < len(b) && b[i] != '"'; i++ {
				switch b[i] {
				case '$', '`':
					return "", nil, errExportP
				case '\\':
					if i+1 < len(b) && bytes.IndexByte([]byte("$`\"\\\n"), b[i+1]) >= 0 {
						i++
						if b[i] == '\n' {
							continue
						}
					}
				}
				v = append(v, b[i])
			}
			if i == len(b) {
				return "", nil, errExportP
			}
		case '\\':
			if i+1 == len(b) {
				return "", nil, errExportP
			}
			i++
			if b[i] != '\n' {
				v = append(v, b[i])
			}
		case '$', '`', ' ', '\t', ';', '&', '|', '<', '>', '(', ')':
			return "", nil, errExportP
		default:
			v = append(v, c)
		}
	}
	return "", nil, errExportP
}

// exportPState reads what shellWrapperFast wrote: cwd, NUL, `export -p` and
// the end mark. It keeps what shellWrapper's trap keeps: variables with a value
// of more than maxEnvValue bytes are dropped (and named in dropped), as are
// SHLVL and _; the environment is sorted. envOK is false (env nil) when the
// listing is cut or unreadable, or larger than what shellWrapper's reader
// takes, so the previous environment stands as it did there.
func exportPState(b []byte) (dropped []string, cwd string, env []string, envOK, ok bool) {
	c, rest, ok := bytes.Cut(b, []byte{0})
	if !ok {
		return nil, "", nil, false, false
	}
	cwd = strings.TrimSuffix(string(c), "\n")
	all, err := parseExportP(rest)
	if err != nil {
		return nil, cwd, nil, false, true
	}
	// The size shellWrapper's listing would have had: its first line, the
	// cwd, each NAME=value and NUL, the end mark.
	size := len(c) + 2 + len(envEnd) + 1
	for _, kv := range all {
		k, v, _ := strings.Cut(kv, "=")
		if len(v) > maxEnvValue {
			dropped = append(dropped, k)
			size += len(k) + 1
			continue
		}
		size += len(kv) + 1
		if k == "SHLVL" || k == "_" {
			continue
		}
		env = append(env, kv)
	}
	if size > maxEnvTotal+1<<16 {
		return nil, cwd, nil, false, true
	}
	sort.Strings(env)
	return dropped, cwd, env, true, true
}

// probeState reads what shellWrapper wrote when probing: the usual state, then
// the shell's kind, its `export -p` and the end mark. fast is true when the
// shell is neither bash nor zsh (which can export functions and names that
// `export -p` does not list) and its `export -p`, parsed, equals its `env -0`
// and holds the probe value exactly; decided is false when the probe part is
// missing (env -0 could not run) and the next exec should probe again. The
// probe variable is taken out of the environment.
func probeState(b []byte) (dropped []string, cwd string, env []string, envOK, ok, fast, decided bool) {
	head, probe := b, []byte(nil)
	if i := bytes.Index(b, []byte("\x00"+envEnd+"\x00")); i >= 0 {
		head, probe = b[:i+len(envEnd)+2], b[i+len(envEnd)+2:]
	}
	if len(head) > maxEnvTotal+1<<16 {
		// shellWrapper's reader would have stopped here.
		head, probe = head[:maxEnvTotal+1<<16], nil
	}
	dropped, cwd, env, envOK, ok = parseState(head)
	if env != nil {
		env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "__dx_probe=") })
	}
	if !envOK || len(probe) == 0 {
		return dropped, cwd, env, envOK, ok, false, false
	}
	kind, listing, _ := bytes.Cut(probe, []byte{'\n'})
	all, err := parseExportP(listing)
	if len(kind) != 0 || err != nil || !slices.Contains(all, "__dx_probe="+envProbe) {
		return dropped, cwd, env, envOK, ok, false, true
	}
	var got []string
	for _, kv := range all {
		k, _, _ := strings.Cut(kv, "=")
		if k != "SHLVL" && k != "_" && k != "__dx_probe" {
			got = append(got, kv)
		}
	}
	sort.Strings(got)
	return dropped, cwd, env, envOK, ok, slices.Equal(got, env), true
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
	cap := shellCap(s.cfg.OutputCap, req.Caps)
	t := &transcript{all: tail.New(cap)}
	out, errb := tail.New(cap), tail.New(cap)
	wrapper, probe, limit := shellWrapper, "", int64(maxEnvTotal+1<<16)
	switch {
	case s.shell.exportP:
		wrapper, limit = shellWrapperFast, exportPLimit
	case !s.shell.probed:
		probe, limit = envProbe, exportPLimit
	}
	cmd := s.command(s.shell.path, "-c", wrapper, "sh", s.shell.cwd, s.ws, req.Command, probe)
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
		state, _ = io.ReadAll(io.LimitReader(stateR, limit))
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
		var dropped []string
		var cwd string
		var newEnv []string
		var envOK, ok bool
		switch {
		case s.shell.exportP:
			dropped, cwd, newEnv, envOK, ok = exportPState(state)
		case probe != "":
			var fast, decided bool
			dropped, cwd, newEnv, envOK, ok, fast, decided = probeState(state)
			s.shell.probed, s.shell.exportP = decided, fast
		default:
			dropped, cwd, newEnv, envOK, ok = parseState(state)
		}
		if ok {
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
	res.OOMKills = s.takeOOMKills()
	tb, ttr := t.all.Bytes()
	ob, otr := out.Bytes()
	eb, etr := errb.Bytes()
	res.Transcript, res.Stdout, res.Stderr = string(tb), string(ob), string(eb)
	res.Truncated = ttr || otr || etr
	if req.Caps != nil {
		// An exec that set its own caps gets the marker where its head went.
		for _, f := range []struct {
			s  *string
			tr bool
		}{{&res.Transcript, ttr}, {&res.Stdout, otr}, {&res.Stderr, etr}} {
			if f.tr {
				*f.s = markHead(*f.s)
			}
		}
	}
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

// announce tells the host, on the host and seatbelt rungs, which process leads the exec's
// session, so that it can be killed if the guest dies mid-exec.
func (s *session) announce(pid int) {
	// The seatbelt rung's guest is unconfined too (its commands are
	// confined one by one): nothing but the host kills an exec it left.
	if (s.cfg.Rung == "host" || s.cfg.Rung == "seatbelt") && s.peer != nil {
		s.peer.Notify(wire.VerbExecStarted, &wire.ExecStarted{PID: pid})
	}
}

// command is exec.Command(name, args...) behind the session's
// CommandPrefix: every process the guest starts for a command (a shell
// exec's shell, a Python runner) goes through here, so that on the
// seatbelt rung each is started by sandbox-exec under the commands'
// profile. sandbox-exec execs the command in place: the pid, its session
// and the fds it is handed are the command's.
func (s *session) command(name string, args ...string) *exec.Cmd {
	p := s.cfg.CommandPrefix
	if len(p) == 0 {
		return exec.Command(name, args...)
	}
	return exec.Command(p[0], slices.Concat(p[1:], []string{name}, args)...)
}

// resolveShell turns SessionStart.Shell into the binary execs run in, looked
// for in the sandbox's own view: "" is bash where /bin/bash is there (what
// agents write assumes it: $'a\nb', arrays, [[ ]]), else /bin/sh.
func resolveShell(want string) (string, error) {
	executable := func(p string) bool {
		st, err := os.Stat(p)
		return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
	}
	switch want {
	case "":
		if executable("/bin/bash") {
			return "/bin/bash", nil
		}
		return "/bin/sh", nil
	case "bash":
		want = "/bin/bash"
	case "sh":
		want = "/bin/sh"
	}
	if !filepath.IsAbs(want) || !executable(want) {
		return "", fmt.Errorf("shell %s: not an executable file in the sandbox", want)
	}
	return want, nil
}
