//go:build dryexec_testhooks

package guest

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/internal/testhooks"
	"github.com/dryexec/dryexec/wire"
)

// vmPanicHook panics the VM's kernel when args hold
// testhooks.VMPanicEnv=1 (a session exec's environment, a trial's argv: the
// guest does not see a trial command's environment, which goes to the
// stub). It does not return then; it reports on the console why it could
// not.
func vmPanicHook(args []string) {
	if !slices.Contains(args, testhooks.VMPanicEnv+"=1") {
		return
	}
	err := crashVMKernel()
	fmt.Fprintf(os.Stderr, "dryexec guest: test hook %s: %v\n", testhooks.VMPanicEnv, err)
}

// crashVMKernel writes 'c' to sysrq-trigger, which panics the kernel at
// once; the VM's kernel command line (panic=-1, reboot=t) and QEMU's
// -no-reboot make that QEMU's exit. The guest's own /proc has the entry
// read-only (lockProc): a procfs instance of its own, mounted nowhere
// (fsmount), has it writable for root of the VM. It refuses anywhere but
// in a dryexec VM, whose kernel command line starts the vm init: the
// same code runs on the host's kernel on other rungs.
func crashVMKernel() error {
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return err
	}
	if !strings.Contains(string(cmdline), "-- guest "+wire.RoleVMInit) {
		return errors.New("refused: not in a dryexec VM")
	}
	fsfd, err := unix.Fsopen("proc", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("fsopen proc: %w", err)
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return fmt.Errorf("creating a procfs: %w", err)
	}
	mnt, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("fsmount proc: %w", err)
	}
	defer unix.Close(mnt)
	fd, err := unix.Openat(mnt, "sysrq-trigger", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, []byte("c")); err != nil {
		return fmt.Errorf("writing sysrq-trigger: %w", err)
	}
	return errors.New("the kernel did not panic")
}
