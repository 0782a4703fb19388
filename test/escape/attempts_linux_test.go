package escape

import (
	"regexp"

	"github.com/dryexec/dryexec"
)

// refused is the command seeing the kernel's (or the filter's) refusal.
var refused = record{output: regexp.MustCompile(errRefused)}

// rlimitFallback: rootless callers without a delegated cgroup get rlimits,
// which contain a bomb but cannot report it; the delta says so.
var rlimitFallback = record{warning: "limits fall back to rlimits"}

// attempts is the corpus. Syscall numbers in Python scripts are amd64's.
var attempts = []attempt{
	// Writes that aim past the overlay.
	{name: "write_via_proc_self_root", sh: `echo pwned > /proc/self/root$TARGET && echo wrote; echo pwned > /proc/self/root$CANARY`,
		// As root the write lands in the overlay (a captured change); rootless
		// the target is not the command's to write.
		accept: []record{captured("canary.txt")}},
	{name: "write_via_proc_1_root", sh: `echo pwned > /proc/1/root$TARGET && echo ESCAPED; echo pwned > /proc/1/root$CANARY && echo ESCAPED; ls /proc/1/root/ >/dev/null && echo ESCAPED listing`,
		accept: []record{refused}},
	{name: "write_via_host_pid", sh: `ls /proc/$HOSTPID/root/ >/dev/null 2>&1 && echo ESCAPED; echo pwned > /proc/$HOSTPID/root$TARGET`,
		accept: []record{refused}},
	{name: "inherited_fds_lead_nowhere", py: `
extra = []
for x in os.listdir('/proc/self/fd'):
    try:
        extra.append((int(x), os.readlink('/proc/self/fd/' + x)))
    except OSError:
        pass  # the listing's own fd, closed by now
extra = [e for e in extra if e[0] > 2]
if extra: print("ESCAPED inherited", extra)
print("fds 0-2 only; refused others")`,
		accept: []record{output(`fds 0-2 only; refused`)}},
	{name: "open_by_handle_at", amd64: true, py: `
buf = ctypes.create_string_buffer(b"\x08\x00\x00\x00\x01\x00\x00\x00" + b"\x02\x00\x00\x00\x00\x00\x00\x00")
attempt("open_by_handle_at", sc(304, -100, ctypes.addressof(buf), 0))`,
		accept: []record{syscallViolation("open_by_handle_at")}},
	{name: "hard_link_to_host_file", sh: `ln $TARGET ./hl 2>&1 && echo pwned >> ./hl; ln $CANARY ./hl2 && echo pwned >> ./hl2`,
		accept: []record{captured("hl2"), refused}},
	{name: "symlink_write_through", sh: `ln -s $TARGET ./sl && echo pwned > ./sl; ln -s $CANARY ./sl2 && echo pwned > ./sl2`,
		accept: []record{captured("canary.txt")}},
	{name: "write_host_dev_shm", sh: `echo pwned > /dev/shm/dryexec-escape-shm && cat /dev/shm/dryexec-escape-shm`,
		absent: []string{"/dev/shm/dryexec-escape-shm"}, accept: []record{output(`pwned`)}},
	{name: "host_unix_socket", py: `
for a in (os.environ['SOCK'], '\0' + os.environ['ABSTRACT']):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(a); print("ESCAPED connected", repr(a))
    except OSError as e:
        print("refused", repr(a), e.strerror)`,
		accept: []record{output(`refused .*refused`)}},

	// Mounts and roots.
	{name: "mount_tmpfs", amd64: true, py: `attempt("mount", sc(165, b"none", b"/mnt", b"tmpfs", 0, 0))`,
		accept: []record{syscallViolation("mount")}},
	{name: "mount_bind_root", amd64: true, py: `attempt("mount", sc(165, b"/", b"/mnt", 0, 4096, 0))`,
		accept: []record{syscallViolation("mount")}},
	{name: "umount_proc_sys", amd64: true, py: `attempt("umount2", sc(166, b"/proc/sys", 2))`,
		accept: []record{syscallViolation("umount2")}},
	{name: "pivot_root", amd64: true, py: `os.mkdir("new"); attempt("pivot_root", sc(155, b".", b"new"))`,
		accept: []record{syscallViolation("pivot_root")}},
	{name: "new_mount_api", amd64: true, py: `
attempt("fsopen", sc(430, b"tmpfs", 0))
attempt("open_tree", sc(428, -100, b"/", 1))`,
		accept: []record{syscallViolation("fsopen")}},
	{name: "chroot_breakout", py: `
os.mkdir("jail")
try:
    os.chroot("jail")
    for _ in range(64): os.chdir("..")
    os.chroot(".")
    open("/dryexec-escape-chroot", "w").write("pwned")
    print("chroot breakout stayed in the sandbox")
except OSError as e:
    print("refused", e.strerror)`,
		absent: []string{"/dryexec-escape-chroot"},
		accept: []record{syscallViolation("chroot"), captured("/dryexec-escape-chroot"), refused}},
	{name: "unshare_user", amd64: true, py: `attempt("unshare", sc(272, 0x10000000))`,
		accept: []record{syscallViolation("unshare")}},
	{name: "unshare_mount", amd64: true, py: `attempt("unshare", sc(272, 0x00020000))`,
		accept: []record{syscallViolation("unshare")}},
	{name: "unshare_tool", sh: `unshare -Urm sh -c 'umount -l /proc/sys && echo ESCAPED'`,
		accept: []record{syscallViolation("unshare"), refused}},
	{name: "clone_newuser_newns", amd64: true, py: `
r = sc(56, 0x10000000 | 0x00020000 | 17, 0, 0, 0, 0)
if r[0] == 0: os._exit(0)
attempt("clone", r)`,
		accept: []record{syscallViolation("clone")}},
	// A bare clone(CLONE_NEWUSER) is let through (the guest's launcher needs it,
	// see containment/seccomp); inside that namespace nothing more may be had.
	{name: "clone_newuser_gains_nothing", amd64: true, py: `
r = sc(56, 0x10000000 | 17, 0, 0, 0, 0)
if r[0] == 0:
    attempt("unshare-in-child", sc(272, 0x00020000))
    attempt("mount-in-child", sc(165, b"none", b"/mnt", b"tmpfs", 0, 0))
    sys.stdout.flush()
    os._exit(0)
if r[0] > 0: os.waitpid(r[0], 0)
# Refused outright (gVisor refuses a user namespace to a chrooted process,
# which a gvisor command is: it chroots to its pid namespace's root).
if r[0] < 0: print("refused clone", errno.errorcode.get(r[1], r[1]))
print("child done")`,
		accept: []record{syscallViolation("unshare")}},
	{name: "setns_pid1", amd64: true, py: `
try:
    fd = os.open("/proc/1/ns/mnt", os.O_RDONLY)
    attempt("setns", sc(308, fd, 0))
except OSError as e:
    print("refused open", e.strerror)`,
		accept: []record{syscallViolation("setns"), refused}},

	// Other processes.
	{name: "ptrace_pid1", amd64: true, py: `attempt("ptrace", sc(101, 16, 1, 0, 0))`,
		accept: []record{syscallViolation("ptrace"), refused}},
	{name: "ptrace_host_pid", amd64: true, py: `attempt("ptrace", sc(101, 16, int(os.environ['HOSTPID']), 0, 0))`,
		accept: []record{syscallViolation("ptrace"), refused, output(`ESRCH`)}},
	{name: "process_vm_writev_pid1", amd64: true, py: `
buf = ctypes.create_string_buffer(8)
iov = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8)
attempt("process_vm_writev", sc(311, 1, ctypes.addressof(iov), 1, ctypes.addressof(iov), 1, 0))`,
		accept: []record{syscallViolation("process_vm_writev"), refused}},
	{name: "kill_everything", sh: `sleep 30 & kill -9 -1; echo killed`,
		// kill -1 reaches only this pid namespace: the test process (the
		// host) survives, which is what reaching this line proves.
		accept: []record{output(`killed`)}},

	// Kernel interfaces a sandbox never needs.
	{name: "io_uring_setup", amd64: true, py: `
p = ctypes.create_string_buffer(120)
attempt("io_uring_setup", sc(425, 8, ctypes.addressof(p)))`,
		accept: []record{syscallViolation("io_uring_setup")}},
	{name: "io_uring_enter", amd64: true, py: `attempt("io_uring_enter", sc(426, 0, 1, 0, 0, 0, 0))`,
		accept: []record{syscallViolation("io_uring_enter")}},
	{name: "bpf_prog_load", amd64: true, py: `
attr = ctypes.create_string_buffer(128)
attempt("bpf", sc(321, 5, ctypes.addressof(attr), 128))`,
		accept: []record{syscallViolation("bpf")}},
	{name: "perf_event_open", amd64: true, py: `
attr = ctypes.create_string_buffer(128)
attempt("perf_event_open", sc(298, ctypes.addressof(attr), 0, -1, -1, 0))`,
		accept: []record{syscallViolation("perf_event_open")}},
	{name: "keyctl_join", amd64: true, py: `attempt("keyctl", sc(250, 1, 0))`,
		accept: []record{syscallViolation("keyctl")}},
	{name: "add_key", amd64: true, py: `attempt("add_key", sc(248, b"user", b"dryexec", b"data", 4, -3))`,
		accept: []record{syscallViolation("add_key")}},
	{name: "request_key", amd64: true, py: `attempt("request_key", sc(249, b"user", b"dryexec", 0, -3))`,
		accept: []record{syscallViolation("request_key")}},
	{name: "init_module", amd64: true, py: `attempt("init_module", sc(175, 0, 0, b""))`,
		accept: []record{syscallViolation("init_module")}},
	{name: "finit_module", amd64: true, py: `
fd = os.open("/bin/true", os.O_RDONLY)
attempt("finit_module", sc(313, fd, b"", 0))`,
		accept: []record{syscallViolation("finit_module")}},
	{name: "delete_module", amd64: true, py: `attempt("delete_module", sc(176, b"loop", 0))`,
		accept: []record{syscallViolation("delete_module")}},
	{name: "kexec_load", amd64: true, py: `attempt("kexec_load", sc(246, 0, 0, 0, 0))`,
		accept: []record{syscallViolation("kexec_load")}},
	{name: "reboot_cad_off", amd64: true, py: `attempt("reboot", sc(169, 0xfee1dead, 672274793, 0))`,
		accept: []record{syscallViolation("reboot")}},
	{name: "swapon", amd64: true, py: `attempt("swapon", sc(167, b"/nonexistent-swap", 0))`,
		accept: []record{syscallViolation("swapon")}},
	{name: "clock_settime", amd64: true, py: `
import time
ts = (ctypes.c_long * 2)(int(time.time()), 0)
attempt("clock_settime", sc(227, 0, ctypes.addressof(ts)))`,
		accept: []record{syscallViolation("clock_settime")}},
	{name: "userfaultfd", amd64: true, py: `attempt("userfaultfd", sc(323, 0))`,
		accept: []record{syscallViolation("userfaultfd")}},
	{name: "acct", amd64: true, py: `attempt("acct", sc(163, b"/tmp/acct"))`,
		accept: []record{syscallViolation("acct")}},

	// Sockets.
	{name: "raw_socket", py: `sock("raw", socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)`,
		accept: []record{syscallViolation("socket"), refused}},
	{name: "packet_socket", py: `sock("packet", socket.AF_PACKET, socket.SOCK_RAW, 0)`,
		accept: []record{syscallViolation("socket"), refused}},
	{name: "vsock_socket", py: `sock("vsock", 40, socket.SOCK_STREAM, 0)`,
		// Created only, never connected: this machine's vsock is its hypervisor's.
		accept: []record{syscallViolation("socket")}},
	{name: "netlink_route_add", sh: `ip route add 10.213.0.0/16 dev lo 2>&1 && echo ESCAPED route; ip link add dryexec0 type dummy 2>&1 && echo ESCAPED link`,
		accept: []record{refused}},

	// /proc, /sys and devices.
	{name: "proc_sys_core_pattern", sh: `v=$(cat /proc/sys/kernel/core_pattern); printf '%s\n' "$v" > /proc/sys/kernel/core_pattern && echo ESCAPED`,
		watch: []string{"/proc/sys/kernel/core_pattern"}, accept: []record{refused}},
	{name: "proc_sys_vm", sh: `cat /proc/sys/vm/swappiness > /proc/sys/vm/swappiness && echo ESCAPED`,
		watch: []string{"/proc/sys/vm/swappiness"}, accept: []record{refused}},
	{name: "proc_irq_affinity", sh: `for f in /proc/irq/default_smp_affinity /proc/irq/*/smp_affinity; do [ -e "$f" ] && cat "$f" > "$f" 2>&1 && echo ESCAPED $f; done; echo done`,
		watch: []string{"/proc/irq/default_smp_affinity"}, accept: []record{refused, output(`^done`)}},
	{name: "proc_kernel_info_masked", sh: `for f in /proc/kcore /proc/keys /proc/timer_list /proc/sched_debug; do [ -s "$f" ] && echo ESCAPED readable $f; done; echo checked`,
		accept: []record{output(`checked`)}},
	{name: "sys_write", sh: `echo 1 > /sys/kernel/mm/ksm/run && echo ESCAPED; echo x > /sys/fs/cgroup/cgroup.procs && echo ESCAPED`,
		watch: []string{"/sys/kernel/mm/ksm/run"}, accept: []record{refused}},
	{name: "cgroup_procs_escape", sh: `for f in /sys/fs/cgroup/memory/cgroup.procs /sys/fs/cgroup/pids/cgroup.procs /sys/fs/cgroup/unified/cgroup.procs /sys/fs/cgroup/cgroup.procs; do echo $$ > $f 2>&1 && echo ESCAPED $f; done; echo tried`,
		accept: []record{refused, output(`tried`)}},
	{name: "device_nodes", py: `
for d in ("/dev/kvm", "/dev/mem", "/dev/kmem", "/dev/port", "/dev/sda", "/dev/vda", "/dev/nvme0n1", "/dev/loop0", "/dev/vsock", "/dev/vhost-vsock"):
    try:
        fd = os.open(d, os.O_RDONLY)
        print("ESCAPED opened", d)
        os.close(fd)
    except OSError as e:
        print("refused", d, e.strerror)`,
		accept: []record{output(`refused /dev/kvm`)}},
	{name: "mknod_block_device", py: `
import stat
try:
    os.mknod("sda", 0o600 | stat.S_IFBLK, os.makedev(8, 0))
    fd = os.open("sda", os.O_RDONLY)
    print("ESCAPED opened a block device")
except OSError as e:
    print("refused", e.strerror)`,
		accept: []record{syscallViolation("mknod"), refused}},
	{name: "tiocsti_tty", py: `
import fcntl, termios
for fd in (0, 1, 2):
    try:
        fcntl.ioctl(fd, termios.TIOCSTI, b"x"); print("ESCAPED injected", fd)
    except OSError as e:
        print("refused", fd, e.strerror)
try:
    os.open("/dev/tty", os.O_RDWR); print("ESCAPED controlling tty")
except OSError as e:
    print("refused tty", e.strerror)`,
		accept: []record{syscallViolation("ioctl"), output(`refused tty`)}},

	// Secrets.
	{name: "read_masked_secret", sh: `cat $SECRET; ls -a $(dirname $SECRET); cp -r $(dirname $SECRET) ./stolen`,
		accept: []record{violation(dryexec.ViolationSecret, "")}},

	// Resource bombs: each also runs under the trial timeout and the test's
	// own context.
	{name: "fork_bomb", sh: `b() { b | b & }; b; sleep 2; echo survived`,
		tune:   func(s *dryexec.TrialSpec) { s.Limits.Pids = 128; s.Action.TimeoutMS = 20_000 },
		accept: []record{violation("limit", "pids"), rlimitFallback}},
	{name: "memory_bomb", py: `
x = []
while True:
    x.append(b"\1" * (16 << 20))`,
		tune:        func(s *dryexec.TrialSpec) { s.Limits.MemoryBytes = 256 << 20; s.Action.TimeoutMS = 60_000 },
		smallRlimit: true,
		accept:      []record{violation("limit", "memory"), rlimitFallback}},
	{name: "disk_bomb", sh: `dd if=/dev/zero of=fill bs=1M count=512 2>&1; echo done`,
		tune:   func(s *dryexec.TrialSpec) { s.UpperSizeBytes = 64 << 20 },
		accept: []record{violation("limit", "")}},
	{name: "sleep_past_timeout", sh: `sleep 600; echo ESCAPED woke`,
		tune:   func(s *dryexec.TrialSpec) { s.Action.TimeoutMS = 500 },
		accept: []record{{timedOut: true}}},
	{name: "setuid_binary_gains_nothing", sh: `grep NoNewPrivs /proc/self/status; cp /bin/sh ./suidsh && chmod 4755 ./suidsh; ./suidsh -c 'id -u' `,
		accept: []record{output(`NoNewPrivs:\s+1`)}},
}
