package guest

import (
	"os"

	"github.com/dryexec/dryexec/internal/procfs"
)

// vmOOM counts the OOM kills of the VM's kernel while a vm trial's command
// runs: the VM's RAM is the trial's memory limit, and a command that fills it
// is ended by that kernel's OOM killer (SIGKILL, exit 137), which the host
// cannot see. /proc/vmstat's oom_kill counts every kill the kernel made; the
// trial's guest is the only other process of the VM that could be chosen, and
// protect takes it out of the choice.
type vmOOM struct{ before int64 }

// vmStat is the VM kernel's counters (its own: the VM has no other).
const vmStat = "/proc/vmstat"

// newVMOOM reads the counter before the command runs.
func newVMOOM() *vmOOM {
	n, _ := procfs.FileField(vmStat, "oom_kill")
	return &vmOOM{before: n}
}

// protect keeps the OOM killer off the calling process (the trial's guest,
// root in the VM), so that it lives to report: the command's processes,
// forked before, keep their own score. Best effort: a guest killed anyway
// leaves the host without trial.exit, an incomplete delta.
func (o *vmOOM) protect() {
	os.WriteFile("/proc/self/oom_score_adj", []byte("-1000"), 0)
}

// kills is how many processes the kernel OOM-killed since newVMOOM.
func (o *vmOOM) kills() int64 {
	n, ok := procfs.FileField(vmStat, "oom_kill")
	if !ok || n < o.before {
		return 0
	}
	return n - o.before
}
