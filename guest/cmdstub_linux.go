package guest

import (
	"encoding/binary"
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

// A cmdStub is the trial's command process started before the command is
// known. Starting a command from the guest is the most expensive part of a
// warm trial: the guest is a Go process of several megabytes, it cannot use
// vfork (the command gets a user namespace of its own), so each start copies
// the guest's page tables, writes the new namespace's id maps and then
// throws the copy away again in execve. A sandbox that waits in a pool does
// all of that ahead of time: it starts the stub, a tiny static program
// (cmdstub/stub.c), already in the command's session, user namespace,
// confinement and stdio; when trial.run comes the guest writes the command
// to the stub's request pipe and the stub execs it.
//
// Protocol, on the stub's descriptors:
//
//	0, 1, 2  /dev/null, the trial's stdout and stderr
//	3        request pipe: a stubHeader, then NUL-terminated strings: the
//	         path to exec, the directory to run in, argv, env
//	4        status pipe: closed by the exec (the stub marks it close-on-exec);
//	         a failure writes a stage and an errno (two uint32) first
//	5        the command's stdin when the request asks for it (flag 1)
//
// EOF on fd 3 before a request ends the stub quietly (a pooled sandbox
// discarded unused).
//
// Where the architecture has no stub binary (stubELF is empty) or the kernel
// refuses to exec one from a memfd, the guest binary plays the stub (role
// RoleStub, runStub below), speaking the same protocol: slower to exec into,
// but still started ahead of time.
type cmdStub struct {
	pid    int
	req    *os.File // the request pipe's write end
	status *os.File // the status pipe's read end
}

// stubMagic opens every request ("stub", little-endian).
const stubMagic = 0x62757473

// stubFlagStdin: dup fd 5 onto fd 0 before exec.
const stubFlagStdin = 1

// Stages a stub reports a failure at.
const (
	stubStageRequest = 1 + iota // a malformed request
	stubStageMemory             // no memory for the request
	stubStageRead               // the request was cut short
	stubStageChdir
	stubStageStdin
	stubStageExec
)

// stubHeader precedes a request's strings.
type stubHeader struct {
	Magic, Flags, Argc, Envc uint32
	Size                     uint64 // bytes of strings that follow
}

// stubExe is the program a cmdStub runs: the native stub from a sealed memfd,
// or the guest itself. The memfd is created once per guest.
type stubExe struct {
	path string
	argv []string
}

// newStubExe loads the native stub, falling back to the guest binary.
func newStubExe() *stubExe {
	if stubELF != "" {
		if fd, err := stubMemfd(); err == nil {
			return &stubExe{path: "/proc/self/fd/" + strconv.Itoa(fd), argv: []string{"dryexec-stub"}}
		}
	}
	return &stubExe{path: selfExe(), argv: []string{"dryexec", "guest", RoleStub}}
}

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
	return fd, nil
}

// startStub starts a stub with attr (its session, user namespace) and
// nproc (when not 0) as its RLIMIT_NPROC; stdout and stderr become its fds 1
// and 2, stdin (when not -1) the fd a request may ask for as stdin. It must
// run on the launcher thread, whose confinement the stub inherits.
func startStub(exe *stubExe, attr *syscall.SysProcAttr, nproc int64, stdout, stderr, stdin uintptr) (*cmdStub, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, err
	}
	reqR, reqW := os.NewFile(uintptr(p[0]), "stub-request"), os.NewFile(uintptr(p[1]), "stub-request")
	defer reqR.Close()
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		reqW.Close()
		return nil, err
	}
	statR, statW := os.NewFile(uintptr(p[0]), "stub-status"), os.NewFile(uintptr(p[1]), "stub-status")
	defer statW.Close()
	devnull, err := os.Open("/dev/null")
	if err != nil {
		reqW.Close()
		statR.Close()
		return nil, err
	}
	defer devnull.Close()
	pid, err := syscall.ForkExec(exe.path, exe.argv, &syscall.ProcAttr{
		Env:   []string{},
		Files: []uintptr{devnull.Fd(), stdout, stderr, reqR.Fd(), statW.Fd(), stdin},
		Sys:   attr,
	})
	if err != nil {
		reqW.Close()
		statR.Close()
		return nil, fmt.Errorf("starting the command's stub: %w", err)
	}
	s := &cmdStub{pid: pid, req: reqW, status: statR}
	if nproc > 0 {
		lim := unix.Rlimit{Cur: uint64(nproc), Max: uint64(nproc)}
		if err := unix.Prlimit(pid, unix.RLIMIT_NPROC, &lim, nil); err != nil {
			s.kill()
			return nil, fmt.Errorf("limiting the command's processes: %w", err)
		}
	}
	return s, nil
}

// kill ends a stub that will not run a command.
func (s *cmdStub) kill() {
	unix.Kill(s.pid, unix.SIGKILL)
	s.req.Close()
	s.status.Close()
}

// run hands the stub the command: bin (resolved) with r's argv, env and
// directory. Traced by mt (when not nil) from here on, attached before the
// command runs a single instruction of its own. Seized rather than started
// with PTRACE_TRACEME, the command's execs cost no ptrace stop.
func (s *cmdStub) run(bin string, r *wire.TrialRun, mt *memTracer) error {
	req, err := stubRequest(bin, r)
	if err != nil {
		return err
	}
	if mt != nil {
		if err := mt.seize(s.pid); err != nil {
			return fmt.Errorf("tracing the command: %w", err)
		}
	}
	_, err = s.req.Write(req)
	s.req.Close()
	return err
}

// stubRequest encodes a request. A string with a NUL byte cannot be passed
// to execve: EINVAL, as Go's own ForkExec says.
func stubRequest(bin string, r *wire.TrialRun) ([]byte, error) {
	h := stubHeader{Magic: stubMagic, Argc: uint32(len(r.Argv)), Envc: uint32(len(r.Env))}
	if r.Stdin {
		h.Flags |= stubFlagStdin
	}
	strs := make([]string, 0, 2+len(r.Argv)+len(r.Env))
	strs = append(append(append(strs, bin, r.Cwd), r.Argv...), r.Env...)
	for _, s := range strs {
		if strings.IndexByte(s, 0) >= 0 {
			return nil, unix.EINVAL
		}
		h.Size += uint64(len(s)) + 1
	}
	b := make([]byte, 0, binary.Size(h)+int(h.Size))
	b, _ = binary.Append(b, binary.NativeEndian, &h)
	for _, s := range strs {
		b = append(append(b, s...), 0)
	}
	return b, nil
}

// startError is how the stub failed to exec the command, once it is dead:
// nil when it exec'd.
func (s *cmdStub) startError() error {
	defer s.status.Close()
	var m [8]byte
	n, _ := s.status.Read(m[:])
	if n < len(m) {
		return nil
	}
	return &stubError{Stage: binary.NativeEndian.Uint32(m[:4]), Errno: unix.Errno(binary.NativeEndian.Uint32(m[4:]))}
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
	}
	return fmt.Sprintf("the command's stub failed (stage %d): %v", e.Stage, e.Errno)
}

func (e *stubError) Unwrap() error { return e.Errno }

// runStub is RoleStub: the guest binary standing in for the native stub, with
// the same protocol (see cmdStub).
func runStub() int {
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
	req := os.NewFile(3, "stub-request")
	var h stubHeader
	if err := binary.Read(req, binary.NativeEndian, &h); err != nil {
		if err == io.EOF {
			return 0
		}
		return fail(stubStageRead, unix.EIO)
	}
	if h.Magic != stubMagic || h.Argc == 0 || h.Size > 1<<31 {
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
	if h.Flags&stubFlagStdin != 0 {
		if err := unix.Dup2(5, 0); err != nil {
			return fail(stubStageStdin, err)
		}
	}
	unix.Close(3)
	unix.Close(5)
	argv := strs[2 : 2+h.Argc]
	return fail(stubStageExec, unix.Exec(strs[0], argv, strs[2+h.Argc:]))
}
