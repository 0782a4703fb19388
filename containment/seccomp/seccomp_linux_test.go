package seccomp

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// filtered runs fn on a fresh OS thread that carries the default filter and
// dies afterwards (the goroutine never unlocks it), serving the listener on
// this thread. It returns the reported events.
func filtered(t *testing.T, fn func()) []*Event {
	t.Helper()
	prog, err := Default().Program(true)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var evs []*Event
	srv := &Server{Profile: Default(), Report: func(e *Event) { mu.Lock(); evs = append(evs, e); mu.Unlock() }}
	fdc := make(chan int, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread dies with the filter
		fd, err := Install(prog, true)
		if err != nil {
			t.Error(err)
			fdc <- -1
			return
		}
		fdc <- fd
		fn()
	}()
	fd := <-fdc
	if fd < 0 {
		t.FailNow()
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background(), fd) }()
	<-done
	// The thread exits once its goroutine does; the listener then hangs up.
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	return evs
}

func TestFilterRefusesAndReports(t *testing.T) {
	type call struct {
		name      string
		nr        uintptr
		args      [3]uintptr
		errno     unix.Errno
		reported  string // event Name, "" if none
		wantAllow bool
	}
	calls := []call{
		{name: "keyctl", nr: unix.SYS_KEYCTL, args: [3]uintptr{0, 0, 0}, errno: unix.EPERM, reported: "keyctl"},
		{name: "bpf", nr: unix.SYS_BPF, errno: unix.EPERM, reported: "bpf"},
		{name: "io_uring_setup", nr: unix.SYS_IO_URING_SETUP, args: [3]uintptr{1, 0, 0}, errno: unix.EPERM, reported: "io_uring_setup"},
		{name: "vsock", nr: unix.SYS_SOCKET, args: [3]uintptr{unix.AF_VSOCK, unix.SOCK_STREAM, 0}, errno: unix.EAFNOSUPPORT, reported: "socket"},
		{name: "packet", nr: unix.SYS_SOCKET, args: [3]uintptr{unix.AF_PACKET, unix.SOCK_RAW, 0}, errno: unix.EPERM, reported: "socket"},
		{name: "raw inet", nr: unix.SYS_SOCKET, args: [3]uintptr{unix.AF_INET, unix.SOCK_RAW | unix.SOCK_CLOEXEC, 1}, errno: unix.EPERM, reported: "socket"},
		{name: "unshare userns", nr: unix.SYS_UNSHARE, args: [3]uintptr{unix.CLONE_NEWUSER}, errno: unix.EPERM, reported: "unshare"},
		{name: "personality odd", nr: unix.SYS_PERSONALITY, args: [3]uintptr{0x0040000}, errno: unix.EPERM, reported: "personality"},
		{name: "clone3 silent", nr: unix.SYS_CLONE3, errno: unix.ENOSYS},
		{name: "x32 getpid", nr: 0x40000000 | unix.SYS_GETPID, errno: unix.ENOSYS, reported: "x32:39"},
		{name: "newer than known", nr: maxKnown + 1, errno: unix.ENOSYS, reported: Name(maxKnown + 1)},
		{name: "personality query", nr: unix.SYS_PERSONALITY, args: [3]uintptr{0xffffffff}, wantAllow: true},
		{name: "udp socket", nr: unix.SYS_SOCKET, args: [3]uintptr{unix.AF_INET, unix.SOCK_DGRAM | unix.SOCK_CLOEXEC, 0}, wantAllow: true},
		{name: "unshare files", nr: unix.SYS_UNSHARE, args: [3]uintptr{unix.CLONE_FILES}, wantAllow: true},
	}
	if runtime.GOARCH != "amd64" {
		calls = calls[:len(calls)-5] // x32 is amd64's
	}
	got := make([]unix.Errno, len(calls))
	evs := filtered(t, func() {
		for i, c := range calls {
			r, _, e := unix.Syscall(c.nr, c.args[0], c.args[1], c.args[2])
			got[i] = e
			if e == 0 && c.nr == unix.SYS_SOCKET {
				unix.Close(int(r))
			}
		}
	})
	byName := map[string]int{}
	for _, e := range evs {
		byName[e.Name]++
		if e.PID == 0 || e.Exe == "" || e.Detail == "" {
			t.Errorf("event lacks pid/exe/detail: %+v", e)
		}
	}
	for i, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			if c.wantAllow {
				if got[i] == c.errno && got[i] != 0 && got[i] != unix.EPERM {
					return
				}
				if got[i] == unix.EPERM && c.nr == unix.SYS_UNSHARE {
					return // not allowed by the kernel to a non-root test, but not by us
				}
				if got[i] != 0 && got[i] != unix.EPERM && got[i] != unix.EINVAL {
					t.Errorf("errno %v, want the call to reach the kernel", got[i])
				}
				return
			}
			if got[i] != c.errno {
				t.Errorf("errno %v, want %v", got[i], c.errno)
			}
			if c.reported == "" {
				if byName[c.name] != 0 || byName["clone3"] != 0 {
					t.Errorf("silent refusal was reported")
				}
				return
			}
			if byName[c.reported] == 0 {
				t.Errorf("no event %q among %v", c.reported, byName)
			}
		})
	}
	for _, e := range evs {
		if e.Name == "socket" && e.Args[0] == unix.AF_VSOCK && e.Detail != "socket(AF_VSOCK, SOCK_STREAM, 0)" {
			t.Errorf("vsock detail %q", e.Detail)
		}
	}
}

// TestContinueLetsTheSupervisorThreadClone: the supervisor's own launching
// thread runs under the filter, and a Continue hook passes its clone with
// CLONE_NEWUSER on; the same call from anyone else is refused.
func TestContinue(t *testing.T) {
	prog, err := Default().Program(true)
	if err != nil {
		t.Fatal(err)
	}
	var tid int
	tidc := make(chan int, 1)
	fdc := make(chan int, 1)
	res := make(chan unix.Errno, 2)
	go func() {
		runtime.LockOSThread()
		tidc <- unix.Gettid()
		fd, err := Install(prog, true)
		if err != nil {
			t.Error(err)
			fdc <- -1
			return
		}
		fdc <- fd
		// unshare(CLONE_NEWUSER) of a multi-threaded process is EINVAL from
		// the kernel: that the kernel answers shows the call was let through.
		_, _, e := unix.Syscall(unix.SYS_UNSHARE, unix.CLONE_NEWUSER, 0, 0)
		res <- e
	}()
	tid = <-tidc
	fd := <-fdc
	if fd < 0 {
		t.FailNow()
	}
	var reported int
	srv := &Server{Profile: Default(), Continue: func(c *Call) bool { return c.PID == tid }, Report: func(*Event) { reported++ }}
	if err := srv.Serve(context.Background(), fd); err != nil {
		t.Fatal(err)
	}
	if e := <-res; e != unix.EINVAL {
		t.Errorf("continued unshare: %v, want the kernel's EINVAL", e)
	}
	if reported != 0 {
		t.Errorf("a continued call was reported")
	}
}

// TestProgramShape runs the compiled program in a small classic-BPF
// interpreter: foreign architectures and unknown numbers are refused, the
// listed calls are refused only under their conditions.
func TestProgramShape(t *testing.T) {
	prog, err := Default().Program(false)
	if err != nil {
		t.Fatal(err)
	}
	run := func(arch uint32, nr int, args ...uint64) uint32 {
		var d [64]byte
		*(*int32)(unsafe.Pointer(&d[0])) = int32(nr)
		*(*uint32)(unsafe.Pointer(&d[4])) = arch
		for i, a := range args {
			*(*uint64)(unsafe.Pointer(&d[16+8*i])) = a
		}
		var acc uint32
		for pc := 0; pc < len(prog); pc++ {
			in := prog[pc]
			switch in.Code {
			case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
				acc = *(*uint32)(unsafe.Pointer(&d[in.K]))
			case unix.BPF_ALU | unix.BPF_AND | unix.BPF_K:
				acc &= in.K
			case unix.BPF_RET | unix.BPF_K:
				return in.K
			case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K,
				unix.BPF_JMP | unix.BPF_JGT | unix.BPF_K, unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
				var ok bool
				switch in.Code &^ (unix.BPF_JMP | unix.BPF_K) {
				case unix.BPF_JEQ:
					ok = acc == in.K
				case unix.BPF_JGE:
					ok = acc >= in.K
				case unix.BPF_JGT:
					ok = acc > in.K
				case unix.BPF_JSET:
					ok = acc&in.K != 0
				}
				if ok {
					pc += int(in.Jt)
				} else {
					pc += int(in.Jf)
				}
			default:
				t.Fatalf("unexpected instruction %#x", in.Code)
			}
		}
		t.Fatal("fell off the program")
		return 0
	}
	allow := uint32(unix.SECCOMP_RET_ALLOW)
	errno := func(e unix.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(e) }
	tab := table()
	cases := []struct {
		name string
		arch uint32
		nr   int
		args []uint64
		want uint32
	}{
		{"i386 call", unix.AUDIT_ARCH_I386, 1, nil, errno(unix.ENOSYS)},
		{"getpid", nativeArch, unix.SYS_GETPID, nil, allow},
		{"mount", nativeArch, tab["mount"], nil, errno(unix.EPERM)},
		{"clone thread", nativeArch, tab["clone"], []uint64{unix.CLONE_VM | unix.CLONE_THREAD}, allow},
		{"clone newpid", nativeArch, tab["clone"], []uint64{unix.CLONE_NEWPID | 17}, errno(unix.EPERM)},
		{"clone high bits only", nativeArch, tab["clone"], []uint64{1 << 40}, allow},
		{"ptrace attach 1", nativeArch, tab["ptrace"], []uint64{unix.PTRACE_ATTACH, 1}, errno(unix.EPERM)},
		{"ptrace attach 7", nativeArch, tab["ptrace"], []uint64{unix.PTRACE_ATTACH, 7}, allow},
		{"ptrace seize 1", nativeArch, tab["ptrace"], []uint64{unix.PTRACE_SEIZE, 1}, errno(unix.EPERM)},
		{"tiocsti", nativeArch, tab["ioctl"], []uint64{0, unix.TIOCSTI}, errno(unix.EPERM)},
		{"tcgets", nativeArch, tab["ioctl"], []uint64{0, unix.TCGETS}, allow},
		{"raw6", nativeArch, tab["socket"], []uint64{unix.AF_INET6, unix.SOCK_RAW | unix.SOCK_NONBLOCK}, errno(unix.EPERM)},
		{"tcp6", nativeArch, tab["socket"], []uint64{unix.AF_INET6, unix.SOCK_STREAM}, allow},
		{"netlink", nativeArch, tab["socket"], []uint64{unix.AF_NETLINK, unix.SOCK_RAW}, allow},
		{"personality linux", nativeArch, tab["personality"], []uint64{0}, allow},
		{"prlimit64 self", nativeArch, tab["prlimit64"], []uint64{0, unix.RLIMIT_NOFILE}, allow},
		{"prlimit64 pid 1", nativeArch, tab["prlimit64"], []uint64{1, unix.RLIMIT_NOFILE}, errno(unix.EPERM)},
		{"prlimit64 a thread id", nativeArch, tab["prlimit64"], []uint64{4, unix.RLIMIT_CPU}, errno(unix.EPERM)},
		{"prlimit64 high bits only", nativeArch, tab["prlimit64"], []uint64{1 << 32, unix.RLIMIT_CPU}, allow},
		{"personality addr_no_randomize", nativeArch, tab["personality"], []uint64{0x0040000}, errno(unix.EPERM)},
		{"clone3", nativeArch, tab["clone3"], nil, errno(unix.ENOSYS)},
		{"above max", nativeArch, maxKnown + 1, nil, errno(unix.ENOSYS)},
	}
	for _, c := range cases {
		if got := run(c.arch, c.nr, c.args...); got != c.want {
			t.Errorf("%s: %#x, want %#x", c.name, got, c.want)
		}
	}
	t.Logf("%d instructions, %d calls refused", len(prog), len(Default().Names()))
}
