package guest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/wire"
)

// A zygote is a fork server for one command, started ahead for a pooled
// sandbox: a process forked from the confined launcher thread into the
// command's own user namespace, which re-executes the guest binary as
// `guest zygote` and waits. When the trial comes it starts the command with
// vfork and exec, says which pid it got, and exits, so that the command is
// re-parented to the guest (PID 1), which waits for it as for a forked one.
//
// Why: the guest cannot vfork a command into a new user namespace
// (CLONE_NEWUSER excludes CLONE_VM), so it pays for a full fork of its own
// address space plus the namespace and its id maps: over a millisecond in a
// nested VM, most of a warm trial. The zygote is already in the namespace
// and small, so its vfork is cheap. (A zygote that execs the command itself
// would not help: tearing down its own address space at exec costs about
// what the fork saved.)
//
// What differs from a forked command, and how it is made not to matter:
//   - The memory tracer attaches at trial time (PTRACE_SEIZE of the
//     zygote's main thread, which forks the command, so the command is
//     traced from birth); the zygote's own exit is not measured.
//   - The guest reaps the zygote before the command: its CPU time (from
//     wait4) is taken off the children's total.
//   - ru_maxrss is the largest child's, the zygote's included: with the
//     tracer on, the command's peak comes from its processes' VmHWM instead.
//
// Descriptors in the zygote: 0–2 the command's stdio (0 the stdin pipe; the
// command gets /dev/null instead when the trial has no stdin), zygoteReqFD
// the request (read to EOF), zygoteStatusFD its status: the ready line, then
// "started PID" or why the command could not be started.
type zygote struct {
	pid    int
	req    *os.File // the request pipe's write end
	status *os.File // the status pipe's read end
	ready  zygoteReady
}

const (
	zygoteReqFD    = 3
	zygoteStatusFD = 4
)

// zygoteRequest is what the zygote execs.
type zygoteRequest struct {
	Path  string   `json:"path"` // resolved by the guest (lookPath)
	Argv  []string `json:"argv"`
	Env   []string `json:"env"`
	Cwd   string   `json:"cwd"`
	Stdin bool     `json:"stdin,omitempty"` // keep fd 0; else /dev/null
}

// zygoteReady is the zygote's first status line: the thread that will fork
// the command (the tracer seizes it).
type zygoteReady struct {
	tid int
}

// startZygote forks the zygote. It must run on the launcher thread: the
// zygote inherits that thread's confinement, and becomes that thread's child.
func startZygote(cfg *wire.TrialStart) (*zygote, error) {
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer reqR.Close()
	stR, stW, err := os.Pipe()
	if err != nil {
		reqW.Close()
		return nil, err
	}
	defer stW.Close()
	// /proc/self/exe is the guest binary whatever the sandbox's view holds
	// at its path (the magic link resolves to the file itself).
	pid, err := syscall.ForkExec(selfExe(), []string{"dryexec-guest", "guest", RoleZygote}, &syscall.ProcAttr{
		Env:   []string{},
		Files: []uintptr{wire.StdinFD, wire.StdoutFD, wire.StderrFD, reqR.Fd(), stW.Fd()},
		Sys:   commandAttr(cfg),
	})
	if err != nil {
		reqW.Close()
		stR.Close()
		return nil, fmt.Errorf("starting the zygote: %w", err)
	}
	return &zygote{pid: pid, req: reqW, status: stR}, nil
}

// errZygoteGone: the zygote did not come up (or died waiting); the command
// is started the ordinary way instead.
var errZygoteGone = errors.New("the pre-started process is gone")

// waitReady waits for the zygote's ready line; an error means the zygote
// is not usable (discard it).
func (z *zygote) waitReady() error {
	r, err := readReady(z.status)
	z.ready = r
	return err
}

func readReady(status *os.File) (zygoteReady, error) {
	var buf [64]byte
	n, err := status.Read(buf[:])
	if err != nil || n == 0 || buf[n-1] != '\n' {
		return zygoteReady{}, errZygoteGone
	}
	rest, ok := strings.CutPrefix(strings.TrimSpace(string(buf[:n])), "ready ")
	tid, err := strconv.Atoi(rest)
	if !ok || err != nil || tid <= 0 {
		return zygoteReady{}, errZygoteGone
	}
	return zygoteReady{tid: tid}, nil
}

// send hands the zygote its command; it execs as soon as it has read it.
func (z *zygote) send(req *zygoteRequest) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	_, err = z.req.Write(b)
	if cerr := z.req.Close(); err == nil {
		err = cerr
	}
	return err
}

// outcome reads what the zygote said after its ready line, once it has
// exited: the command's pid, or why it could not start it.
func (z *zygote) outcome() (int, string) {
	b, _ := io.ReadAll(io.LimitReader(z.status, 4096))
	line := strings.TrimSpace(string(b))
	if rest, ok := strings.CutPrefix(line, "started "); ok {
		if pid, err := strconv.Atoi(rest); err == nil && pid > 0 {
			return pid, ""
		}
	}
	if line == "" {
		line = "the pre-started process ended before starting the command"
	}
	return 0, line
}

// discard kills a zygote that will not be used (the kill -1 at the end of a
// trial would too; this is for a fallback before the command starts).
func (z *zygote) discard() {
	unix.Kill(z.pid, unix.SIGKILL)
	var ws unix.WaitStatus
	for {
		if _, err := unix.Wait4(z.pid, &ws, unix.WALL, nil); err != unix.EINTR {
			break
		}
	}
	z.close()
}

func (z *zygote) close() {
	z.req.Close()
	z.status.Close()
}

// runZygote is the zygote's own side: say ready, read the request, start
// it, say its pid, exit. It runs inside the sandbox, confined, as the
// command's user.
func runZygote() int {
	status := os.NewFile(zygoteStatusFD, "status")
	fail := func(code int, f string, args ...any) int {
		fmt.Fprintf(status, f+"\n", args...)
		return code
	}
	if _, err := fmt.Fprintf(status, "ready %d\n", unix.Gettid()); err != nil {
		return 126
	}
	b, err := io.ReadAll(os.NewFile(zygoteReqFD, "request"))
	if err != nil {
		return fail(126, "reading the command: %v", err)
	}
	var req zygoteRequest
	if err := json.Unmarshal(b, &req); err != nil || len(req.Argv) == 0 {
		return fail(126, "reading the command: %v", err)
	}
	stdin := uintptr(0)
	if !req.Stdin {
		f, err := os.Open("/dev/null")
		if err != nil {
			return fail(126, "opening /dev/null: %v", err)
		}
		stdin = f.Fd()
	}
	// Not a user namespace nor ptrace: Go forks this with vfork.
	pid, err := syscall.ForkExec(req.Path, req.Argv, &syscall.ProcAttr{
		Dir: req.Cwd, Env: req.Env, Files: []uintptr{stdin, 1, 2},
		Sys: &syscall.SysProcAttr{Setsid: true},
	})
	if err != nil {
		code := 126
		if errors.Is(err, syscall.ENOENT) {
			code = 127
		}
		return fail(code, "exec %s: %v", req.Argv[0], err)
	}
	return fail(0, "started %d", pid)
}

// start makes the (ready) zygote start bin: it attaches mt (if not nil) to
// the thread that will fork it and sends the command. An error leaves the
// zygote to be discarded.
func (z *zygote) start(cfg *wire.TrialStart, bin string, mt *memTracer) error {
	if mt != nil {
		if err := mt.seize(z.pid, z.ready.tid); err != nil {
			return err
		}
	}
	return z.send(&zygoteRequest{Path: bin, Argv: cfg.Argv, Env: cfg.Env, Cwd: cfg.Cwd, Stdin: cfg.Stdin})
}

func (z *zygote) discardIfAny() {
	if z != nil {
		z.discard()
	}
}
