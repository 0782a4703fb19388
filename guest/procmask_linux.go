package guest

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// /proc is the sandbox's own (its pid namespace), but a few of its entries are
// the host kernel's, and as root the command's uid 0 is the host's uid 0 (an
// identity-mapped user namespace): file permissions alone would let it write
// /proc/sys/kernel/core_pattern and take the host. These entries are therefore
// made read-only or hidden, the same set container runtimes protect.
var (
	// procReadOnly are bound read-only over themselves: reading them is normal
	// (sysctl -a, tools that inspect IRQs), writing them changes the host.
	procReadOnly = []string{"sys", "sysrq-trigger", "irq", "bus", "fs"}
	// procMasked are hidden (an empty file or directory): they leak the host's
	// kernel state or accept writes no sandbox needs.
	procMaskedFiles = []string{"kcore", "keys", "timer_list", "timer_stats", "sched_debug", "latency_stats"}
	procMaskedDirs  = []string{"acpi", "scsi"}
)

// lockProc protects the host-wide entries of the /proc mounted at root+"/proc".
// devNull is a character device node to bind over masked files. A missing
// entry (kernels differ) is skipped; any other failure fails the trial, since
// running without the protection would be worse.
func lockProc(root, devNull string) error {
	proc := root + "/proc/"
	const ro = unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	for _, n := range procReadOnly {
		p := proc + n
		if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return fmt.Errorf("binding /proc/%s: %w", n, err)
		}
		if err := unix.Mount(p, p, "", ro, ""); err != nil {
			return fmt.Errorf("making /proc/%s read-only: %w", n, err)
		}
	}
	for _, n := range procMaskedFiles {
		if err := unix.Mount(devNull, proc+n, "", unix.MS_BIND, ""); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("masking /proc/%s: %w", n, err)
		}
	}
	for _, n := range procMaskedDirs {
		err := unix.Mount("masked", proc+n, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0,mode=0555")
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("masking /proc/%s: %w", n, err)
		}
	}
	return nil
}
