package guest

import (
	"os"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/internal/procfs"
	"github.com/dryexec/dryexec/wire"
)

// memTracer measures the memory delta of a trial: the command's process is
// seized before the command starts in it (see cmdStub), so there is no
// window before it is traced, with every fork, vfork and clone traced too, and each process is stopped
// just before it exits (PTRACE_O_TRACEEXIT), when its /proc/PID/smaps_rollup
// still holds Private_Dirty: the private pages it wrote during its life and
// still had. Soft-dirty bits would measure the same without stopping anyone,
// but kernels built without CONFIG_MEM_SOFT_DIRTY (this project's machines)
// have none, and PAGEMAP_SCAN only sees write-protected pages registered from
// inside the process.
//
// All ptrace calls come from one thread (the launcher's: ptrace binds a
// tracee to the tracer thread), and its wait loop (runCommand) hands every
// stop here.
type memTracer struct {
	pages map[int]int64 // per thread group: the most Private_Dirty seen at an exit, in pages
	exits int
	// leaders are tasks known to lead their thread group (the command, and
	// what a fork or vfork made): their exit needs no /proc read for it.
	leaders map[int]bool
	// live are the traced tasks not yet reaped: every task of the sandbox,
	// since each one starts traced (lastAlive).
	live map[int]bool
	buf  []byte // read's
}

// memTraceOptions: every new task is traced, every exit stops. Execs are not
// traced: a seized tracee (and every task auto-attached from it) execs
// without a stop.
const memTraceOptions = unix.PTRACE_O_TRACEFORK | unix.PTRACE_O_TRACEVFORK | unix.PTRACE_O_TRACECLONE |
	unix.PTRACE_O_TRACEEXIT | unix.PTRACE_O_EXITKILL

// seize starts tracing pid, which has not run any of the command yet (it is
// a cmdStub waiting for its request). It does not stop it.
func (m *memTracer) seize(pid int) error {
	m.pages, m.leaders, m.live = map[int]int64{}, map[int]bool{pid: true}, map[int]bool{pid: true}
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(pid), 0, memTraceOptions, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// takeFirstStop takes the first stop of a command started with
// PTRACE_TRACEME (the SIGTRAP after its execve), puts nproc on it as its
// RLIMIT_NPROC before it runs a single instruction of its own, and detaches.
func takeFirstStop(pid int, nproc int64) error {
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, unix.WALL, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		break
	}
	if !ws.Stopped() {
		return unix.ESRCH // it died before running: the wait loop will see nothing more
	}
	if err := limitNPROC(pid, nproc); err != nil {
		unix.Kill(pid, unix.SIGKILL)
		return err
	}
	return unix.PtraceDetach(pid)
}

// limitNPROC sets pid's RLIMIT_NPROC (soft and hard) to n: a command's
// pids limit under the rlimit fallback (docs/limits.md).
//
// It runs on another thread than its caller's, the launcher: the seccomp
// profile refuses setting another process's limits to everything the
// launcher starts, and to the launcher too, which shares its filter. A
// goroutine not locked to a thread never runs on the launcher's.
func limitNPROC(pid int, n int64) error {
	lim := unix.Rlimit{Cur: uint64(n), Max: uint64(n)}
	errc := make(chan error, 1)
	go func() { errc <- unix.Prlimit(pid, unix.RLIMIT_NPROC, &lim, nil) }()
	return <-errc
}

// stopped handles one ptrace stop of task tid and resumes it.
func (m *memTracer) stopped(tid int, ws unix.WaitStatus) {
	sig := ws.StopSignal()
	m.live[tid] = true // a new task's first stop may come before its creator's event
	switch {
	case sig == unix.SIGTRAP && ws.TrapCause() == unix.PTRACE_EVENT_EXIT:
		m.measure(tid)
		unix.PtraceCont(tid, 0)
	case sig == unix.SIGTRAP && (ws.TrapCause() == unix.PTRACE_EVENT_FORK || ws.TrapCause() == unix.PTRACE_EVENT_VFORK):
		// A new process: it leads its thread group.
		if child, err := unix.PtraceGetEventMsg(tid); err == nil {
			m.leaders[int(child)] = true
			m.live[int(child)] = true
		}
		unix.PtraceCont(tid, 0)
	case sig == unix.SIGTRAP && ws.TrapCause() == unix.PTRACE_EVENT_CLONE:
		// A new thread (or a process made with clone and no CLONE_THREAD,
		// which measure tells apart by its Tgid).
		if child, err := unix.PtraceGetEventMsg(tid); err == nil {
			m.live[int(child)] = true
		}
		unix.PtraceCont(tid, 0)
	case sig == unix.SIGTRAP && ws.TrapCause() > 0:
		// A new task's first stop (PTRACE_EVENT_STOP: tasks auto-attached
		// from a seized one start with it; it may come before its parent's
		// event).
		unix.PtraceCont(tid, 0)
	default:
		// A signal on its way: deliver it. A group-stop (a seized tracee
		// reports it as PTRACE_EVENT_STOP with the stopping signal, and
		// GETSIGINFO fails) is resumed: job control stops do not hold a
		// traced trial.
		var si [128]byte
		_, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_GETSIGINFO, uintptr(tid), 0, uintptr(unsafe.Pointer(&si[0])), 0, 0)
		if e != 0 {
			sig = 0
		}
		unix.PtraceCont(tid, int(sig))
	}
}

// gone forgets an exited task.
func (m *memTracer) gone(tid int) {
	delete(m.leaders, tid)
	delete(m.live, tid)
}

// lastAlive says whether tid is the only task of the sandbox not reaped.
// Sound because every task starts traced, and its creator's fork or clone
// event (which adds it) comes before the creator can go on to exit.
func (m *memTracer) lastAlive(tid int) bool {
	return len(m.live) == 1 && m.live[tid]
}

// measure records the Private_Dirty of tid's process as it exits.
func (m *memTracer) measure(tid int) {
	dir := "/proc/" + strconv.Itoa(tid)
	tgid := tid
	if !m.leaders[tid] {
		if b, err := m.read(dir + "/status"); err == nil {
			if v, ok := procfs.Field(b, "Tgid:"); ok {
				tgid = int(v)
			}
		}
	}
	b, err := m.read(dir + "/smaps_rollup")
	if err != nil {
		return
	}
	kb, ok := procfs.Field(b, "Private_Dirty:")
	if !ok {
		return
	}
	m.exits++
	if p := kb * 1024 / int64(os.Getpagesize()); p > m.pages[tgid] {
		m.pages[tgid] = p
	}
}

// read returns the start of a small /proc file (up to 4 KiB, which holds
// smaps_rollup and status whole) in a buffer reused until the next read:
// one open, one read, one close, with the traced process held at its exit
// meanwhile.
func (m *memTracer) read(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if m.buf == nil {
		m.buf = make([]byte, 4096)
	}
	n, err := unix.Read(fd, m.buf)
	if err != nil {
		return nil, err
	}
	return m.buf[:n], nil
}

// result is the trial's memory delta.
func (m *memTracer) result() *wire.MemoryUse {
	var pages int64
	for _, p := range m.pages {
		pages += p
	}
	return &wire.MemoryUse{PagesWritten: pages, BytesWritten: pages * int64(os.Getpagesize()), Method: "smaps_exit", Processes: m.exits}
}
