package linuxns

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/testreq"
)

// seccompProbe runs each refused call family from Python inside one trial and
// prints "name errno" per call. Nothing here may do harm if the filter were
// missing: every call either fails in the kernel anyway (no capability over
// the host) or carries arguments the kernel rejects before acting (a bad
// reboot magic, a path that does not exist, the current time).
const seccompProbe = `
import ctypes, errno, mmap, os, socket, time
libc = ctypes.CDLL(None, use_errno=True)
sc = libc.syscall
sc.restype = ctypes.c_long
def call(name, nr, *args):
    ctypes.set_errno(0)
    r = sc(ctypes.c_long(nr), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    print(name, 0 if r >= 0 else ctypes.get_errno(), flush=True)
def sock(name, fam, typ):
    try:
        socket.socket(fam, typ).close(); print(name, 0, flush=True)
    except OSError as e:
        print(name, e.errno, flush=True)
call("mount", 165, b"none", b"/mnt", b"tmpfs", 0, None)
call("umount2", 166, b"/proc", 2)
call("pivot_root", 155, b"/tmp", b"/tmp")
call("chroot", 161, b"/tmp")
call("unshare_net", 272, 0x40000000)
call("unshare_user", 272, 0x10000000)
call("clone_newns", 56, 0x20000 | 17, 0, 0, 0, 0)
call("setns", 308, os.open("/proc/self/ns/net", os.O_RDONLY), 0)
call("io_uring_setup", 425, 1, ctypes.create_string_buffer(120))
call("bpf", 321, 0, None, 0)
call("perf_event_open", 298, None, 0, -1, -1, 0)
call("userfaultfd", 323, 0)
call("keyctl", 250, 0, 0, 0)
call("add_key", 248, b"user", b"x", b"y", 1, -4)
call("init_module", 175, None, 0, b"")
call("finit_module", 313, -1, b"", 0)
call("delete_module", 176, b"nonexistent_module_x", 0)
call("kexec_load", 246, 0, 0, None, 0)
now = ctypes.create_string_buffer(16)
libc.clock_gettime(0, now)
call("clock_settime", 227, 0, now)
call("settimeofday", 164, None, None)
call("reboot", 169, 0, 0, 0, None)
call("swapon", 167, b"/nonexistent-swap", 0)
call("acct", 163, b"/nonexistent-acct")
call("open_by_handle_at", 304, -100, None, 0)
call("personality", 135, 0x0040000)
call("ptrace_guest", 101, 16, 1, 0, 0)
call("tiocsti", 16, 0, 0x5412, ctypes.create_string_buffer(1))
call("x32_getpid", 0x40000000 | 39)
call("newer_than_known", 470)
call("clone3", 435, None, 0)
# The i386 ABI (int 0x80) in a child: a kernel or hypervisor without it
# answers with SIGSEGV, which the test then skips.
pid = os.fork()
if pid == 0:
    code = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    code.write(bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3]))  # mov eax, 20 (i386 getpid); int 0x80; ret
    f = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(code)))
    r = f()
    print("i386_getpid", -r if r < 0 else 0, flush=True)
    os._exit(0)
_, st = os.waitpid(pid, 0)
if os.WIFSIGNALED(st):
    print("i386_getpid unsupported", flush=True)
sock("vsock", 40, socket.SOCK_STREAM)
sock("packet", 17, socket.SOCK_RAW)
sock("raw_inet", socket.AF_INET, socket.SOCK_RAW)
sock("udp", socket.AF_INET, socket.SOCK_DGRAM)
`

// TestSeccompRefusesAndReports: each family of refused calls fails with its
// errno inside a real trial and appears in the delta as a syscall violation
// naming the call, the pid and the executable; calls the filter answers by
// mechanism (clone3) or lets through (a UDP socket) leave no violation; the
// host's mounts and a canary are untouched.
func TestSeccompRefusesAndReports(t *testing.T) {
	requireNS(t)
	testreq.NeedPython(t)
	dir := t.TempDir()
	canary := filepath.Join(dir, "canary")
	if err := os.WriteFile(canary, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	mountsBefore, _ := os.ReadFile("/proc/self/mountinfo")
	timeBefore := time.Now()
	d := runTrial(t, dir, dryexec.TrialSpec{}, "/usr/bin/python3", "-c", seccompProbe)
	if d.Process.ExitCode != 0 {
		t.Fatalf("probe failed: exit %d\n%s\n%s", d.Process.ExitCode, d.Process.Stdout, d.Process.Stderr)
	}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(d.Process.Stdout), "\n") {
		if name, e, ok := strings.Cut(l, " "); ok {
			got[name] = e
		}
	}
	const eperm, enosys, eafnosupport = "1", "38", "97"
	tests := []struct {
		name, errno, violation string // violation: a substring of the detail; "" = none expected
	}{
		{"mount", eperm, `mount("none", "/mnt", "tmpfs")`},
		{"umount2", eperm, `umount2("/proc")`},
		{"pivot_root", eperm, `pivot_root("/tmp", "/tmp")`},
		{"chroot", eperm, `chroot("/tmp")`},
		{"unshare_net", eperm, "unshare(0x40000000: CLONE_NEWNET)"},
		{"unshare_user", eperm, "unshare(0x10000000: CLONE_NEWUSER)"},
		{"clone_newns", eperm, "clone(0x20011: CLONE_NEWNS)"},
		{"setns", eperm, "setns("},
		{"io_uring_setup", eperm, "io_uring_setup("},
		{"bpf", eperm, "bpf("},
		{"perf_event_open", eperm, "perf_event_open("},
		{"userfaultfd", eperm, "userfaultfd("},
		{"keyctl", eperm, "keyctl("},
		{"add_key", eperm, "add_key("},
		{"init_module", eperm, "init_module("},
		{"finit_module", eperm, "finit_module("},
		{"delete_module", eperm, "delete_module("},
		{"kexec_load", eperm, "kexec_load("},
		{"clock_settime", eperm, "clock_settime("},
		{"settimeofday", eperm, "settimeofday("},
		{"reboot", eperm, "reboot("},
		{"swapon", eperm, `swapon("/nonexistent-swap")`},
		{"acct", eperm, `acct("/nonexistent-acct")`},
		{"open_by_handle_at", eperm, "open_by_handle_at("},
		{"personality", eperm, "personality(0x40000)"},
		{"ptrace_guest", eperm, "ptrace(PTRACE_ATTACH, 1)"},
		{"tiocsti", eperm, "ioctl(0, TIOCSTI)"},
		{"x32_getpid", enosys, "system call 39 of the x32 ABI"},
		{"i386_getpid", enosys, "system call 20 of the i386 ABI"},
		{"newer_than_known", enosys, "syscall_470 (newer than this filter knows)"},
		{"vsock", eafnosupport, "socket(AF_VSOCK, SOCK_STREAM, 0)"},
		{"packet", eperm, "socket(AF_PACKET, SOCK_RAW, 0)"},
		{"raw_inet", eperm, "socket(AF_INET, SOCK_RAW, 0)"},
		{"clone3", enosys, ""},
		{"udp", "0", ""},
	}
	var syscalls []dryexec.Violation
	for _, v := range d.Violations {
		if v.Kind == "syscall" {
			syscalls = append(syscalls, v)
		}
	}
	i386 := got["i386_getpid"] != "unsupported"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "i386_getpid" && !i386 {
				testreq.Needf(t, testreq.Kernel, "i386 ABI", errors.New("int 0x80 faults on this machine: the filter's arch check is covered by containment/seccomp's TestProgramShape"))
			}
			if got[tt.name] != tt.errno {
				t.Errorf("errno %q, want %s", got[tt.name], tt.errno)
			}
			if tt.violation == "" {
				return
			}
			for _, v := range syscalls {
				if strings.Contains(v.Detail, tt.violation) {
					if v.PID <= 1 || !strings.Contains(v.Exe, "python3") {
						t.Errorf("violation %+v: want the python process's pid and exe", v)
					}
					return
				}
			}
			t.Errorf("no syscall violation containing %q in %+v", tt.violation, syscalls)
		})
	}
	n := len(tests) - 2
	if !i386 {
		n--
	}
	if len(syscalls) != n {
		t.Errorf("%d syscall violations, want %d: %+v", len(syscalls), n, syscalls)
	}
	if b, _ := os.ReadFile(canary); string(b) != "host" {
		t.Errorf("host canary changed: %q", b)
	}
	if mountsAfter, _ := os.ReadFile("/proc/self/mountinfo"); string(mountsAfter) != string(mountsBefore) {
		t.Errorf("host mount table changed")
	}
	if time.Since(timeBefore) < 0 || time.Since(timeBefore) > time.Minute {
		t.Errorf("host clock moved")
	}
}

// TestLandlockWall: the second wall. A sandboxed process cannot signal the
// guest (PID 1 installs signal handlers, so the pid namespace's protection of
// init would let a SIGTERM through, and as root the command's uid 0 is the
// guest's), cannot make a device node, and a device node found in a host
// directory does not open (the overlays are nodev). The trial completes.
func TestLandlockWall(t *testing.T) {
	requireNS(t)
	dir := t.TempDir()
	if os.Getuid() == 0 {
		// A host directory with a device node in it (/dev/null's numbers:
		// harmless even if it opened).
		if err := unix.Mknod(filepath.Join(dir, "nulldev"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
			t.Fatal(err)
		}
	}
	d := runTrial(t, dir, dryexec.TrialSpec{}, "/bin/sh", "-c",
		`kill -TERM 1 2>/dev/null; echo "term=$?"; kill -USR1 1 2>/dev/null; echo "usr1=$?"
mknod node c 1 3 2>/dev/null; echo "mknod=$?"
if [ -e nulldev ]; then echo x 2>/dev/null > nulldev; echo "dev=$?"; else echo "dev=1"; fi`)
	for _, k := range []string{"term", "usr1", "mknod", "dev"} {
		if !strings.Contains(d.Process.Stdout, k+"=") || strings.Contains(d.Process.Stdout, k+"=0\n") {
			t.Errorf("%s should have failed: %q", k, d.Process.Stdout)
		}
	}
}
