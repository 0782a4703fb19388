package guest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/internal/guestexe"
	"github.com/dryexec/dryexec/wire"
)

// A cmdStub is the trial's command process started before the command is
// known. Starting a command from the guest is the most expensive part of a
// warm trial: the guest is a Go process of several megabytes, it cannot use
// vfork (the command gets a user namespace of its own), so each start copies
// the guest's page tables, writes the new namespace's id maps and then
// throws the copy away again in execve. A sandbox that waits in a pool does
// all of that ahead of time: it starts the stub, a tiny static program
// (cmdstub/stub.c), already in the command's session, user namespace,
// confinement and stdio, and seizes it for the memory tracer. The host
// writes the command to the stub's request pipe itself (wire.StubRequest),
// so that the command starts without waiting for the guest to be scheduled,
// and the stub execs it.
//
// Protocol, on the stub's descriptors:
//
//	0, 1, 2  /dev/null, the trial's stdout and stderr
//	3        the request pipe (wire.StubRequest); a program without a slash
//	         is searched for in the request's PATH
//	4        status pipe: closed by the exec (the stub marks it close-on-exec);
//	         before its first exec of the command the stub writes its own CPU
//	         time (stubStageCPU, 0, then user and system microseconds as two
//	         uint64), a failure writes a stage and an errno (two uint32)
//	5        the command's stdin when the request asks for it
//	6        the gate: the stub reads nothing of fd 3 before EOF here. The
//	         guest closes it once the stub is traced and limited: the host
//	         may have written the command before the stub even started.
//	7        when open, a Landlock ruleset the stub enters first
//	         (nestedRuleset): the command's domain is then nested in the
//	         launcher's, and no signal from the command reaches the guest.
//
// The stub inherits the launcher thread's signal mask, which blocks
// everything (blockAllSignals); it unblocks all before anything else.
//
// EOF on fd 3 before a request ends the stub quietly (a pooled sandbox
// discarded unused).
//
// Where the architecture has no stub binary (stubELF is empty) or the kernel
// refuses to exec one from a memfd, the guest binary plays the stub (role
// wire.RoleStub, runStub below), speaking the same protocol: slower to exec into,
// but still started ahead of time.
type cmdStub struct {
	pid    int
	status *os.File // the status pipe's read end
	// ownUser and ownSys are the stub's own CPU time before it exec'd the
	// command, as it reported it (startError reads it): the kernel counts
	// it as the process's, which the command then is, and most of it is
	// not the command's at all (the exec into the stub tears down the copy
	// of the guest's address space the clone made). runCommand takes it
	// off the command's.
	ownUser, ownSys time.Duration
}

// Stages a stub reports a failure at.
const (
	stubStageRequest = 1 + iota // a malformed request
	stubStageMemory             // no memory for the request
	stubStageRead               // the request was cut short
	stubStageChdir
	stubStageStdin
	stubStageExec
	stubStageConfine // entering the nested Landlock domain
	// stubStageCPU tags the stub's report of its own CPU time, not a
	// failure (cmdstub/stub.c: STAGE_CPU).
	stubStageCPU = 0x100
)

// stubCPURecord is the size of a stubStageCPU report on the status pipe.
const stubCPURecord = 24

// stubExe is the program a cmdStub runs: the native stub from a sealed memfd,
// or the guest itself. The memfd is created once per guest.
type stubExe struct {
	path string
	argv []string
	// hooks are the tests' (cmdstub_testhooks_linux.go); empty in a release
	// build.
	hooks stubHooks
}

// newStubExe loads the native stub, falling back to the guest binary.
func newStubExe() *stubExe {
	if stubELF != "" {
		if fd, err := stubMemfd(); err == nil {
			return &stubExe{path: "/proc/self/fd/" + strconv.Itoa(fd), argv: []string{nativeStubName}}
		}
	}
	return guestStubExe()
}

// guestStubExe is the guest binary as the stub (wire.RoleStub).
func guestStubExe() *stubExe {
	return &stubExe{path: guestexe.Self(), argv: []string{"dryexec", "guest", wire.RoleStub}}
}

// nativeStubName is the native stub's argv[0].
const nativeStubName = "dryexec-stub"

// native says whether e is the native stub.
func (e *stubExe) native() bool { return e.argv[0] == nativeStubName }

// stubMemfd writes stubELF to a sealed, close-on-exec memfd; a child execs it
// through /proc/self/fd (the path is resolved before close-on-exec applies).
func stubMemfd() (int, error) {
	fd, err := unix.MemfdCreate("dryexec-stub", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_EXEC)
	if errors.Is(err, unix.EINVAL) { // kernels before 6.3 know no MFD_EXEC
		fd, err = unix.MemfdCreate("dryexec-stub", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	}
	if err != nil {
		return -1, err
	}
	if _, err := unix.Write(fd, []byte(stubELF)); err != nil {
		unix.Close(fd)
		return -1, err
	}
	seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		unix.Close(fd)
		return -1, err
	}
	// Above the descriptors startStub hands the child (0–7), which the
	// child's dup2s would otherwise overwrite before it execs the path.
	high, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 10)
	unix.Close(fd)
	if err != nil {
		return -1, err
	}
	return high, nil
}

// startStub starts a stub with attr (its session, user namespace) and
// nproc (when not 0) as its RLIMIT_NPROC, seized by mt when mt is not nil;
// stdout and stderr become its fds 1 and 2, req its fd 3 (the request
// pipe's read end), stdin (when not -1) its fd 5. Only then is its gate
// opened: whatever req holds already, the command runs limited and traced
// from its first instruction. It must run on the launcher thread, whose
// confinement the stub inherits and which is the tracer.
func startStub(exe *stubExe, attr *syscall.SysProcAttr, nproc int64, stdout, stderr, req, stdin, ruleset uintptr, mt *memTracer) (*cmdStub, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, err
	}
	statR, statW := os.NewFile(uintptr(p[0]), "stub-status"), os.NewFile(uintptr(p[1]), "stub-status")
	defer statW.Close()
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		statR.Close()
		return nil, err
	}
	gateR, gateW := os.NewFile(uintptr(p[0]), "stub-gate"), os.NewFile(uintptr(p[1]), "stub-gate")
	defer gateR.Close()
	defer gateW.Close() // opens the gate; the error returns kill the stub first
	devnull, err := os.Open("/dev/null")
	if err != nil {
		statR.Close()
		return nil, err
	}
	defer devnull.Close()
	pid, err := syscall.ForkExec(exe.path, exe.argv, &syscall.ProcAttr{
		Env:   []string{},
		Files: []uintptr{devnull.Fd(), stdout, stderr, req, statW.Fd(), stdin, gateR.Fd(), ruleset},
		Sys:   attr,
	})
	if err != nil {
		statR.Close()
		return nil, fmt.Errorf("starting the command's stub: %w", err)
	}
	s := &cmdStub{pid: pid, status: statR}
	exe.hooks.afterStart()
	if nproc > 0 {
		if err := limitNPROC(pid, nproc); err != nil {
			s.kill()
			return nil, fmt.Errorf("limiting the command's processes: %w", err)
		}
	}
	if mt != nil {
		if err := mt.seize(pid); err != nil {
			s.kill()
			return nil, fmt.Errorf("tracing the command: %w", err)
		}
	}
	return s, nil
}

// kill ends a stub that will not run a command.
func (s *cmdStub) kill() {
	unix.Kill(s.pid, unix.SIGKILL)
	s.status.Close()
}

// startError is how the stub failed to exec the command, once it is dead:
// nil when it exec'd. It also reads the stub's report of its own CPU time
// (ownUser, ownSys). One read takes both reports: the stub writes them (atomically: each is
// less than PIPE_BUF) before it execs or exits, so they are in the pipe
// by the time the command has ended, and a read does not wait for the
// pipe's EOF, which a command stopped at its exit has not closed yet.
func (s *cmdStub) startError() error {
	defer s.status.Close()
	var m [stubCPURecord + 8]byte
	n, _ := s.status.Read(m[:])
	b := m[:max(n, 0)]
	if len(b) >= stubCPURecord && binary.NativeEndian.Uint32(b) == stubStageCPU {
		s.ownUser = time.Duration(binary.NativeEndian.Uint64(b[8:])) * time.Microsecond
		s.ownSys = time.Duration(binary.NativeEndian.Uint64(b[16:])) * time.Microsecond
		b = b[stubCPURecord:]
	}
	if len(b) < 8 {
		return nil
	}
	return &stubError{Stage: binary.NativeEndian.Uint32(b[:4]), Errno: unix.Errno(binary.NativeEndian.Uint32(b[4:]))}
}

// A stubError is a stub's failure to start the command.
type stubError struct {
	Stage uint32
	Errno unix.Errno
}

func (e *stubError) Error() string {
	switch e.Stage {
	case stubStageChdir:
		return "changing directory: " + e.Errno.Error()
	case stubStageStdin:
		return "attaching stdin: " + e.Errno.Error()
	case stubStageExec:
		return e.Errno.Error()
	case stubStageConfine:
		return "entering the command's Landlock domain: " + e.Errno.Error()
	}
	return fmt.Sprintf("the command's stub failed (stage %d): %v", e.Stage, e.Errno)
}

func (e *stubError) Unwrap() error { return e.Errno }

// runStub is wire.RoleStub: the guest binary standing in for the native stub, with
// the same protocol (see cmdStub); with arguments (PATH ARGV0 ARGS...) it is
// the exec trampoline (see execTrampoline). It runs on the main thread,
// locked: the thread that unblocks the signals and enters the Landlock domain
// must be the one that execs.
func runStub(args []string) int {
	runtime.LockOSThread()
	var none unix.Sigset_t
	if err := unix.PthreadSigmask(unix.SIG_SETMASK, &none, nil); err != nil {
		return 127
	}
	if len(args) >= 4 && args[0] == "-w" {
		// Released by EOF (cmdstub/stub.c, trampoline mode).
		fd, err := strconv.Atoi(args[1])
		if err == nil {
			_, err = io.Copy(io.Discard, os.NewFile(uintptr(fd), "stub-release"))
			unix.Close(fd)
		}
		if err == nil {
			err = unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
		}
		if err == nil {
			hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
			var data [2]unix.CapUserData
			if err = unix.Capget(&hdr, &data[0]); err == nil {
				data[0].Inheritable, data[1].Inheritable = 0, 0
				err = unix.Capset(&hdr, &data[0])
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "dryexec: the session's process was not released: %v\n", err)
			return 127
		}
		args = args[2:]
	}
	if len(args) >= 2 {
		err := unix.Exec(args[0], args[1:], os.Environ())
		fmt.Fprintf(os.Stderr, "dryexec: cannot execute %s: %v\n", args[0], err)
		return 127
	}
	fail := func(stage uint32, err error) int {
		errno := unix.EIO
		errors.As(err, &errno)
		var m [8]byte
		binary.NativeEndian.PutUint32(m[:4], stage)
		binary.NativeEndian.PutUint32(m[4:], uint32(errno))
		unix.Write(4, m[:])
		return 127
	}
	if _, err := unix.FcntlInt(4, unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
		return 127
	}
	// fd 7 is the ruleset only if the guest passed one: otherwise the Go
	// runtime may have opened something else there as this process started.
	if l, err := os.Readlink("/proc/self/fd/7"); err == nil && l == "anon_inode:[landlock-ruleset]" {
		if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, 7, 0, 0); e != 0 {
			return fail(stubStageConfine, e)
		}
		unix.Close(7)
	}
	if _, err := io.Copy(io.Discard, os.NewFile(6, "stub-gate")); err != nil {
		return fail(stubStageRequest, err)
	}
	unix.Close(6)
	req := os.NewFile(3, "stub-request")
	var h wire.StubHeader
	if err := binary.Read(req, binary.NativeEndian, &h); err != nil {
		if err == io.EOF {
			return 0
		}
		return fail(stubStageRead, unix.EIO)
	}
	if h.Magic != wire.StubMagic || h.Argc == 0 || h.Size > wire.StubMaxSize {
		return fail(stubStageRequest, unix.EINVAL)
	}
	b := make([]byte, h.Size)
	if _, err := io.ReadFull(req, b); err != nil {
		return fail(stubStageRead, unix.EIO)
	}
	strs := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
	if len(b) == 0 || b[len(b)-1] != 0 || len(strs) != 2+int(h.Argc)+int(h.Envc) {
		return fail(stubStageRequest, unix.EINVAL)
	}
	if err := unix.Chdir(strs[1]); err != nil {
		return fail(stubStageChdir, err)
	}
	if h.Flags&wire.StubFlagStdin != 0 {
		if err := unix.Dup2(5, 0); err != nil {
			return fail(stubStageStdin, err)
		}
	}
	unix.Close(3)
	unix.Close(5)
	reportStubCPU()
	return fail(stubStageExec, execSearch(strs[0], strs[2:2+h.Argc], strs[2+h.Argc:]))
}

// reportStubCPU writes the stub's CPU time so far to the status pipe (see
// cmdStub): what the command's time must not include.
func reportStubCPU() {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return
	}
	var m [stubCPURecord]byte
	binary.NativeEndian.PutUint32(m[:4], stubStageCPU)
	binary.NativeEndian.PutUint64(m[8:], uint64(ru.Utime.Nano()/1000))
	binary.NativeEndian.PutUint64(m[16:], uint64(ru.Stime.Nano()/1000))
	unix.Write(4, m[:])
}

// execSearch execs prog as a shell would, and returns only on failure: prog
// itself when it has a slash, else the first entry of env's PATH (an empty
// entry is the directory) that can be exec'd. EACCES from one entry does not
// stop the search, but is the answer if no entry works; no PATH searches
// nothing. stub.c does the same.
func execSearch(prog string, argv, env []string) error {
	if strings.Contains(prog, "/") {
		return unix.Exec(prog, argv, env)
	}
	var path string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	answer := unix.ENOENT
	if path == "" {
		return answer
	}
	for _, dir := range strings.Split(path, ":") {
		if dir == "" {
			dir = "."
		}
		err := unix.Exec(dir+"/"+prog, argv, env)
		switch err {
		case unix.EACCES:
			answer = unix.EACCES
		case unix.ENOENT, unix.ENOTDIR, unix.ELOOP, unix.ENAMETOOLONG:
		default:
			return err
		}
	}
	return answer
}
