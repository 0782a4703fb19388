package guest

import (
	"os"
	"strconv"

	"github.com/dryexec/dryexec/internal/procfs"
)

// vmOOM counts the OOM kills of the VM's kernel while a vm trial's command
// or a vm session's exec runs: the VM's RAM is the memory limit, and a
// command that fills it is ended by that kernel's OOM killer (SIGKILL, exit
// 137), which the host cannot see. /proc/vmstat's oom_kill counts every kill
// the kernel made; the guest is the only other process of the VM that could
// be chosen (vm-init, the VM's PID 1, never is), and protect takes it out of
// the choice.
type vmOOM struct{ before int64 }

// vmStat is the VM kernel's counters (its own: the VM has no other).
const vmStat = "/proc/vmstat"

// newVMOOM reads the counter before the command runs.
func newVMOOM() *vmOOM {
	n, _ := procfs.FileField(vmStat, "oom_kill")
	return &vmOOM{before: n}
}

// protect keeps the OOM killer off the calling process (the guest, root in
// the VM), so that it lives to report: a trial's command, forked before,
// keeps its own score; a session's execs, forked after, get theirs back
// (unprotect). Best effort: a trial guest killed anyway leaves the host
// without trial.exit, an incomplete delta; a session guest, a lost session.
func (o *vmOOM) protect() {
	os.WriteFile("/proc/self/oom_score_adj", []byte("-1000"), 0)
}

// unprotect gives process pid, forked by a protected guest, the score a
// process of the VM starts with: inherited, the guest's -1000 would keep
// the OOM killer off everything the exec starts, and a VM whose RAM is full
// of unkillable processes panics. Raising a score needs no privilege, so
// the exec cannot undo it but by lowering its own, which it cannot (uid 0
// of a user namespace of its own has no CAP_SYS_RESOURCE in the VM's).
func unprotect(pid int) error {
	return os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte("0"), 0)
}

// kills is how many processes the kernel OOM-killed since newVMOOM or the
// last call: a trial asks once, a session after each exec.
func (o *vmOOM) kills() int64 {
	n, ok := procfs.FileField(vmStat, "oom_kill")
	if !ok || n < o.before {
		return 0
	}
	d := n - o.before
	o.before = n
	return d
}
