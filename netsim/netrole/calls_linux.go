package netrole

import (
	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/containment/seccomp"
)

// nsFlags are the namespace flags of clone: the role makes threads, never
// namespaces (a rootless process may otherwise make a user namespace).
const nsFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// allowedCalls is the role's seccomp allow list: what the Go runtime, the
// netstack, TLS, the resolver (Go's, or libc's in a cgo build) and the
// sockets to the parent, the TUN device and allowed upstreams need once
// netsim is made. Not on it, among others: execve and execveat, ptrace,
// process_vm_*, kill (tgkill is: the runtime signals its own threads),
// mount and every namespace call, bind and listen (netsim listens on no
// host port), ioctl, prctl, setuid and capset, bpf, io_uring, keyctl.
// Anything else is refused with EPERM.
func allowedCalls() []seccomp.Allowed {
	nrs := []int{
		// Memory, threads, signals, time: the Go runtime.
		unix.SYS_MMAP, unix.SYS_MUNMAP, unix.SYS_MPROTECT, unix.SYS_MADVISE, unix.SYS_MREMAP, unix.SYS_BRK,
		unix.SYS_RT_SIGACTION, unix.SYS_RT_SIGPROCMASK, unix.SYS_RT_SIGRETURN, unix.SYS_SIGALTSTACK,
		unix.SYS_GETTID, unix.SYS_GETPID, unix.SYS_TGKILL, unix.SYS_FUTEX, unix.SYS_SCHED_YIELD,
		unix.SYS_SCHED_GETAFFINITY, unix.SYS_NANOSLEEP, unix.SYS_CLOCK_GETTIME, unix.SYS_CLOCK_GETRES,
		unix.SYS_CLOCK_NANOSLEEP, unix.SYS_GETTIMEOFDAY, unix.SYS_RESTART_SYSCALL, unix.SYS_EXIT,
		unix.SYS_EXIT_GROUP, unix.SYS_GETRANDOM, unix.SYS_SET_ROBUST_LIST, unix.SYS_RSEQ,
		unix.SYS_GETUID, unix.SYS_GETEUID, unix.SYS_GETGID, unix.SYS_GETEGID, unix.SYS_UNAME,
		// Descriptors and the poller.
		unix.SYS_READ, unix.SYS_WRITE, unix.SYS_READV, unix.SYS_WRITEV, unix.SYS_PREAD64, unix.SYS_CLOSE,
		unix.SYS_FSTAT, unix.SYS_LSEEK, unix.SYS_FCNTL, unix.SYS_PIPE2, unix.SYS_EVENTFD2,
		unix.SYS_EPOLL_CREATE1, unix.SYS_EPOLL_CTL, unix.SYS_EPOLL_PWAIT, unix.SYS_PPOLL,
		// Files: the resolver's, read only (Landlock grants nothing else).
		unix.SYS_OPENAT, unix.SYS_STATX, unix.SYS_FACCESSAT,
		// Sockets: the parent's, the hand-over, DNS and allowed upstreams.
		unix.SYS_SOCKET, unix.SYS_CONNECT, unix.SYS_GETSOCKNAME, unix.SYS_GETPEERNAME,
		unix.SYS_SETSOCKOPT, unix.SYS_GETSOCKOPT, unix.SYS_SENDTO, unix.SYS_RECVFROM, unix.SYS_SENDMSG,
		unix.SYS_RECVMSG, unix.SYS_SENDMMSG, unix.SYS_SHUTDOWN,
	}
	nrs = append(nrs, archCalls()...)
	out := make([]seccomp.Allowed, 0, len(nrs)+2)
	for _, nr := range nrs {
		out = append(out, seccomp.Allowed{Nr: nr})
	}
	return append(out,
		seccomp.Allowed{Nr: unix.SYS_CLONE, Arg0Clear: nsFlags},
		// libc's pthread_create tries clone3 first; its flags are in
		// memory the filter cannot read.
		seccomp.Allowed{Nr: unix.SYS_CLONE3, Errno: unix.ENOSYS},
	)
}
