package guest

import (
	"os"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/internal/procfs"
	"github.com/dryexec/dryexec/wire"
)

// memTracer measures the memory delta of a trial: the command is started
// under ptrace (PTRACE_TRACEME, so there is no window before it is traced)
// with every fork, vfork and clone traced too, and each process is stopped
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
	known map[int]bool  // tasks past their first stop
	pages map[int]int64 // per thread group: the most Private_Dirty seen at an exit, in pages
	exits int
	// leaders are tasks known to lead their thread group (the command, and
	// what a fork or vfork made): their exit needs no /proc read for it.
	leaders map[int]bool
}

const memTraceOptions = unix.PTRACE_O_TRACEFORK | unix.PTRACE_O_TRACEVFORK | unix.PTRACE_O_TRACECLONE |
	unix.PTRACE_O_TRACEEXIT | unix.PTRACE_O_TRACEEXEC | unix.PTRACE_O_EXITKILL

// takeFirstStop takes the command's first stop (the SIGTRAP after its
// execve: it was started with PTRACE_TRACEME), puts nproc (when not 0) on it
// as its RLIMIT_NPROC before it runs a single instruction of its own, and
// lets it run: traced by mt, or, when mt is nil, no longer traced.
func takeFirstStop(pid int, nproc int64, mt *memTracer) error {
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
	if nproc > 0 {
		lim := unix.Rlimit{Cur: uint64(nproc), Max: uint64(nproc)}
		if err := unix.Prlimit(pid, unix.RLIMIT_NPROC, &lim, nil); err != nil {
			unix.Kill(pid, unix.SIGKILL)
			return err
		}
	}
	if mt == nil {
		return unix.PtraceDetach(pid)
	}
	mt.known, mt.pages, mt.leaders = map[int]bool{pid: true}, map[int]int64{}, map[int]bool{pid: true}
	if err := unix.PtraceSetOptions(pid, memTraceOptions); err != nil {
		return err
	}
	return unix.PtraceCont(pid, 0)
}

// stopped handles one ptrace stop of task tid and resumes it.
func (m *memTracer) stopped(tid int, ws unix.WaitStatus) {
	sig := ws.StopSignal()
	switch {
	case sig == unix.SIGTRAP && ws.TrapCause() == unix.PTRACE_EVENT_EXIT:
		m.measure(tid)
		unix.PtraceCont(tid, 0)
	case sig == unix.SIGTRAP && (ws.TrapCause() == unix.PTRACE_EVENT_FORK || ws.TrapCause() == unix.PTRACE_EVENT_VFORK):
		// A new process: it leads its thread group.
		if child, err := unix.PtraceGetEventMsg(tid); err == nil {
			m.leaders[int(child)] = true
		}
		unix.PtraceCont(tid, 0)
	case sig == unix.SIGTRAP && ws.TrapCause() > 0:
		// fork, vfork, clone: the new task reports its own first stop; exec
		// (traced, so that it is an event and not a SIGTRAP sent to the
		// process, as it would be to a tracee without TRACEEXEC).
		unix.PtraceCont(tid, 0)
	case sig == unix.SIGSTOP && !m.known[tid]:
		// A new task's first stop (it may come before its parent's event).
		m.known[tid] = true
		unix.PtraceCont(tid, 0)
	default:
		// A signal on its way: deliver it. A group-stop (GETSIGINFO fails)
		// is resumed: job control stops do not hold a traced trial.
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
	delete(m.known, tid)
	delete(m.leaders, tid)
}

// measure records the Private_Dirty of tid's process as it exits.
func (m *memTracer) measure(tid int) {
	dir := "/proc/" + strconv.Itoa(tid)
	tgid := tid
	if !m.leaders[tid] {
		if b, err := os.ReadFile(dir + "/status"); err == nil {
			if v, ok := procfs.Field(b, "Tgid:"); ok {
				tgid = int(v)
			}
		}
	}
	b, err := os.ReadFile(dir + "/smaps_rollup")
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

// result is the trial's memory delta.
func (m *memTracer) result() *wire.MemoryUse {
	var pages int64
	for _, p := range m.pages {
		pages += p
	}
	return &wire.MemoryUse{PagesWritten: pages, BytesWritten: pages * int64(os.Getpagesize()), Method: "smaps_exit", Processes: m.exits}
}
