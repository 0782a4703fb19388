package seccomp

import (
	"fmt"
	"sort"

	"golang.org/x/sys/unix"
)

// Op is how a Cond compares an argument. Every comparison looks at the low 32
// bits of the argument only: all the arguments the profile inspects are C
// ints or unsigned ints in the kernel (or, for clone's and unshare's flags, the
// namespace bits all live in the low half), so the high half cannot change what
// the kernel does with them.
type Op int

const (
	// OpEq matches when arg == Value.
	OpEq Op = iota
	// OpMaskedEq matches when arg & Mask == Value.
	OpMaskedEq
	// OpAnyBits matches when arg & Mask != 0.
	OpAnyBits
	// OpNotIn matches when arg is none of Values.
	OpNotIn
)

// Cond is one test on one argument of a call.
type Cond struct {
	Arg    int // 0..5
	Op     Op
	Value  uint32
	Mask   uint32
	Values []uint32 // OpNotIn
}

// Rule refuses one system call, always or when all of its Conds match. Several
// rules for the same call are alternatives.
type Rule struct {
	Name  string     // the call's name, as in the kernel's syscall table
	Errno unix.Errno // what the caller sees
	Conds []Cond     // all must match; none: always
	Why   string     // the reason, for docs and reports
	// Handled hands the call to the supervisor to perform or let through
	// (Server.Handle) instead of refusing it: the call returns
	// SECCOMP_RET_USER_NOTIF, or is allowed where there is no supervisor
	// (Program without notify). Errno and Conds are unused.
	Handled bool
	// Silent answers with Errno in the filter itself, without a report. Only
	// for calls refused as a matter of mechanism, not policy: clone3 is
	// refused with ENOSYS so that libc falls back to clone, whose flags the
	// filter can read (clone3 keeps them in memory); every fork would report
	// otherwise.
	Silent bool
}

// Profile is a list of rules for one architecture.
type Profile struct {
	Rules []Rule
}

// Namespace flags of clone/unshare (CLONE_NEWTIME is 0x80, which clone reads
// as part of the exit signal, so only unshare's rule has it).
const nsFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// Default is the ns rung's profile: Docker's default profile's refusals (as
// they apply to a process without CAP_SYS_ADMIN) plus the calls the trial
// boundary has no use for and that have a history of kernel bugs. Calls that
// do not exist on the native architecture are left out by Compile.
func Default() *Profile {
	eperm := func(why string, names ...string) []Rule {
		var rs []Rule
		for _, n := range names {
			rs = append(rs, Rule{Name: n, Errno: unix.EPERM, Why: why})
		}
		return rs
	}
	var rs []Rule
	rs = append(rs, eperm("mounts are the sandbox's, set up before the command runs",
		"mount", "umount2", "umount", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount", "fspick",
		"open_tree", "open_tree_attr", "move_mount", "mount_setattr")...)
	rs = append(rs, eperm("namespaces are the sandbox's", "setns")...)
	rs = append(rs,
		Rule{Name: "unshare", Errno: unix.EPERM, Why: "namespaces are the sandbox's",
			Conds: []Cond{{Arg: 0, Op: OpAnyBits, Mask: nsFlags | unix.CLONE_NEWTIME}}},
		// clone with CLONE_NEWUSER alone is let through: the guest's launcher
		// thread runs under this filter and must start each command in a user
		// namespace of its own, and Go forks with a raw clone that no
		// supervisor can be asked about (the notification would wait on a
		// goroutine the runtime may have parked: a deadlock under GC). A
		// nested user namespace that can own no other namespace (every other
		// flag, unshare and setns are refused) gives its creator nothing over
		// anything it did not own already.
		Rule{Name: "clone", Errno: unix.EPERM, Why: "namespaces are the sandbox's",
			Conds: []Cond{{Arg: 0, Op: OpAnyBits, Mask: nsFlags &^ unix.CLONE_NEWUSER}}},
		Rule{Name: "clone3", Errno: unix.ENOSYS, Silent: true, Why: "its flags are in memory the filter cannot read; libc falls back to clone"},
	)
	rs = append(rs, eperm("kernel attack surface the sandbox has no use for",
		"bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
		"lookup_dcookie", "syslog", "iopl", "ioperm", "uselib", "ustat", "sysfs", "_sysctl", "nfsservctl",
		"vm86", "vm86old")...)
	rs = append(rs, eperm("kernel modules and kexec", "kexec_load", "kexec_file_load", "init_module",
		"finit_module", "delete_module", "create_module", "get_kernel_syms", "query_module")...)
	rs = append(rs, eperm("the kernel keyring is not namespaced", "keyctl", "add_key", "request_key")...)
	rs = append(rs, eperm("host-wide state", "reboot", "swapon", "swapoff", "settimeofday", "stime",
		"clock_settime", "clock_adjtime", "adjtimex", "acct", "quotactl", "quotactl_fd", "open_by_handle_at")...)
	rs = append(rs,
		// Docker's list: the plain Linux personality, UNAME26, and the query.
		Rule{Name: "personality", Errno: unix.EPERM, Why: "execution domains other than Linux",
			Conds: []Cond{{Arg: 0, Op: OpNotIn, Values: []uint32{0, 0x8, 0x20000, 0x20008, 0xffffffff}}}},
		Rule{Name: "ptrace", Errno: unix.EPERM, Why: "the guest supervisor (pid 1)",
			Conds: []Cond{{Arg: 0, Op: OpEq, Value: unix.PTRACE_ATTACH}, {Arg: 1, Op: OpEq, Value: 1}}},
		Rule{Name: "ptrace", Errno: unix.EPERM, Why: "the guest supervisor (pid 1)",
			Conds: []Cond{{Arg: 0, Op: OpEq, Value: unix.PTRACE_SEIZE}, {Arg: 1, Op: OpEq, Value: 1}}},
		// Resource limits are per process, and the kernel lets a process
		// set those of any process with its uid: the command's uid is the
		// guest's (root, or the rootless caller). RLIMIT_NOFILE 0 or
		// RLIMIT_CPU set on any of the guest's thread ids would end the
		// trial without a report (RLIMIT_CPU's hard limit is a SIGKILL the
		// kernel forces). A process may still set its own (pid 0, what libc's
		// setrlimit and the shell's ulimit pass).
		Rule{Name: "prlimit64", Errno: unix.EPERM, Why: "another process's resource limits (the guest's among them)",
			Conds: []Cond{{Arg: 0, Op: OpNotIn, Values: []uint32{0}}}},
		Rule{Name: "socket", Errno: unix.EAFNOSUPPORT, Why: "vsock reaches the hypervisor",
			Conds: []Cond{{Arg: 0, Op: OpEq, Value: unix.AF_VSOCK}}},
		Rule{Name: "socket", Errno: unix.EPERM, Why: "packet sockets",
			Conds: []Cond{{Arg: 0, Op: OpEq, Value: unix.AF_PACKET}}},
		Rule{Name: "socket", Errno: unix.EPERM, Why: "raw IP sockets",
			Conds: []Cond{{Arg: 0, Op: OpEq, Value: unix.AF_INET}, {Arg: 1, Op: OpMaskedEq, Mask: 0xf, Value: unix.SOCK_RAW}}},
		Rule{Name: "socket", Errno: unix.EPERM, Why: "raw IP sockets",
			Conds: []Cond{{Arg: 0, Op: OpEq, Value: unix.AF_INET6}, {Arg: 1, Op: OpMaskedEq, Mask: 0xf, Value: unix.SOCK_RAW}}},
		Rule{Name: "ioctl", Errno: unix.EPERM, Why: "pushing input into a terminal",
			Conds: []Cond{{Arg: 1, Op: OpEq, Value: unix.TIOCSTI}}},
		Rule{Name: "ioctl", Errno: unix.EPERM, Why: "console control",
			Conds: []Cond{{Arg: 1, Op: OpEq, Value: unix.TIOCLINUX}}},
	)
	return &Profile{Rules: rs}
}

// Handle adds a Handled rule for each call named (see Rule.Handled).
func (p *Profile) Handle(why string, names ...string) {
	for _, n := range names {
		p.Rules = append(p.Rules, Rule{Name: n, Handled: true, Why: why})
	}
}

// Lookup returns the first rule for call nr whose conditions match args, or
// nil. The supervisor uses it to answer a notification with the rule's errno
// and reason.
func (p *Profile) Lookup(nr int, args [6]uint64) *Rule {
	t := table()
	for i := range p.Rules {
		r := &p.Rules[i]
		if n, ok := t[r.Name]; !ok || n != nr {
			continue
		}
		if r.matches(args) {
			return r
		}
	}
	return nil
}

func (r *Rule) matches(args [6]uint64) bool {
	for _, c := range r.Conds {
		v := uint32(args[c.Arg])
		switch c.Op {
		case OpEq:
			if v != c.Value {
				return false
			}
		case OpMaskedEq:
			if v&c.Mask != c.Value {
				return false
			}
		case OpAnyBits:
			if v&c.Mask == 0 {
				return false
			}
		case OpNotIn:
			for _, x := range c.Values {
				if v == x {
					return false
				}
			}
		}
	}
	return true
}

// Names lists the calls the profile refuses on this architecture (with or
// without conditions), sorted.
func (p *Profile) Names() []string {
	t := table()
	seen := map[string]bool{}
	var out []string
	for _, r := range p.Rules {
		if _, ok := t[r.Name]; ok && !seen[r.Name] && !r.Handled {
			seen[r.Name] = true
			out = append(out, r.Name)
		}
	}
	sort.Strings(out)
	return out
}

// Name is the call's name on the native architecture, or "syscall_N".
func Name(nr int) string {
	for n, v := range table() {
		if v == nr {
			return n
		}
	}
	return fmt.Sprintf("syscall_%d", nr)
}
