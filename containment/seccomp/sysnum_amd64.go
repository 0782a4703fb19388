//go:build linux && amd64

package seccomp

import "golang.org/x/sys/unix"

// nativeArch is the AUDIT_ARCH of this build's system calls.
const nativeArch = unix.AUDIT_ARCH_X86_64

// x32Bit marks the x32 ABI's call numbers on amd64; a call with it is foreign.
const x32Bit = 0x40000000

// maxKnown is the newest call number this package knows; anything above it is
// refused with ENOSYS (see the package doc).
const maxKnown = unix.SYS_FILE_SETATTR

// table maps the names the profile uses to this architecture's numbers; a
// name missing here does not exist on it.
func table() map[string]int {
	return map[string]int{
		"mount": unix.SYS_MOUNT,
		// Signals (the gvisor rung's command may not signal its guest).
		"kill":              unix.SYS_KILL,
		"tkill":             unix.SYS_TKILL,
		"tgkill":            unix.SYS_TGKILL,
		"rt_sigqueueinfo":   unix.SYS_RT_SIGQUEUEINFO,
		"rt_tgsigqueueinfo": unix.SYS_RT_TGSIGQUEUEINFO,
		"pidfd_open":        unix.SYS_PIDFD_OPEN,
		"pidfd_send_signal": unix.SYS_PIDFD_SEND_SIGNAL,
		"fcntl":             unix.SYS_FCNTL, // F_SETSIG of an unhandleable signal
		"umount2":           unix.SYS_UMOUNT2,
		"pivot_root":        unix.SYS_PIVOT_ROOT,
		"chroot":            unix.SYS_CHROOT,
		"fsopen":            unix.SYS_FSOPEN,
		"fsconfig":          unix.SYS_FSCONFIG,
		"fsmount":           unix.SYS_FSMOUNT,
		"fspick":            unix.SYS_FSPICK,
		"open_tree":         unix.SYS_OPEN_TREE,
		"open_tree_attr":    unix.SYS_OPEN_TREE_ATTR,
		"move_mount":        unix.SYS_MOVE_MOUNT,
		"mount_setattr":     unix.SYS_MOUNT_SETATTR,
		"setns":             unix.SYS_SETNS,
		"unshare":           unix.SYS_UNSHARE,
		"clone":             unix.SYS_CLONE,
		"clone3":            unix.SYS_CLONE3,
		"bpf":               unix.SYS_BPF,
		"perf_event_open":   unix.SYS_PERF_EVENT_OPEN,
		"userfaultfd":       unix.SYS_USERFAULTFD,
		"io_uring_setup":    unix.SYS_IO_URING_SETUP,
		"io_uring_enter":    unix.SYS_IO_URING_ENTER,
		"io_uring_register": unix.SYS_IO_URING_REGISTER,
		"lookup_dcookie":    unix.SYS_LOOKUP_DCOOKIE,
		"syslog":            unix.SYS_SYSLOG,
		"iopl":              unix.SYS_IOPL,
		"ioperm":            unix.SYS_IOPERM,
		"uselib":            unix.SYS_USELIB,
		"ustat":             unix.SYS_USTAT,
		"sysfs":             unix.SYS_SYSFS,
		"_sysctl":           unix.SYS__SYSCTL,
		"nfsservctl":        unix.SYS_NFSSERVCTL,
		"kexec_load":        unix.SYS_KEXEC_LOAD,
		"kexec_file_load":   unix.SYS_KEXEC_FILE_LOAD,
		"init_module":       unix.SYS_INIT_MODULE,
		"finit_module":      unix.SYS_FINIT_MODULE,
		"delete_module":     unix.SYS_DELETE_MODULE,
		"create_module":     unix.SYS_CREATE_MODULE,
		"get_kernel_syms":   unix.SYS_GET_KERNEL_SYMS,
		"query_module":      unix.SYS_QUERY_MODULE,
		"keyctl":            unix.SYS_KEYCTL,
		"add_key":           unix.SYS_ADD_KEY,
		"request_key":       unix.SYS_REQUEST_KEY,
		"reboot":            unix.SYS_REBOOT,
		"swapon":            unix.SYS_SWAPON,
		"swapoff":           unix.SYS_SWAPOFF,
		"settimeofday":      unix.SYS_SETTIMEOFDAY,
		"clock_settime":     unix.SYS_CLOCK_SETTIME,
		"clock_adjtime":     unix.SYS_CLOCK_ADJTIME,
		"adjtimex":          unix.SYS_ADJTIMEX,
		"acct":              unix.SYS_ACCT,
		"quotactl":          unix.SYS_QUOTACTL,
		"quotactl_fd":       unix.SYS_QUOTACTL_FD,
		"open_by_handle_at": unix.SYS_OPEN_BY_HANDLE_AT,
		"personality":       unix.SYS_PERSONALITY,
		"ptrace":            unix.SYS_PTRACE,
		"socket":            unix.SYS_SOCKET,
		"ioctl":             unix.SYS_IOCTL,
		"prlimit64":         unix.SYS_PRLIMIT64,
		"rename":            unix.SYS_RENAME,
		"renameat":          unix.SYS_RENAMEAT,
		"renameat2":         unix.SYS_RENAMEAT2,
		"link":              unix.SYS_LINK,
		"linkat":            unix.SYS_LINKAT,
		"mknod":             unix.SYS_MKNOD,
		"mknodat":           unix.SYS_MKNODAT,
		// chmod of a FIFO (the vm rung's supervisor makes it).
		"chmod":     unix.SYS_CHMOD,
		"fchmod":    unix.SYS_FCHMOD,
		"fchmodat":  unix.SYS_FCHMODAT,
		"fchmodat2": unix.SYS_FCHMODAT2,
		// Given times (the vm rung's supervisor has the host set them).
		"utimensat": unix.SYS_UTIMENSAT,
	}
}
