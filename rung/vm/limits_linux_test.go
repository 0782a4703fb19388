package vm

import (
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/cgroup"
)

// TestHostLimits: QEMU's cgroup holds the VM's RAM and QEMU's overhead at
// least, the memory limit asked for when larger, nothing when none is
// asked; pids with room for QEMU's threads; the CPU quota as asked.
func TestHostLimits(t *testing.T) {
	def := cgroup.Defaults(dryexec.Limits{}).MemoryBytes
	for _, c := range []struct {
		l     dryexec.Limits
		memMB int64
		mem   int64
		pids  int64
		cpus  float64
	}{
		{dryexec.Limits{MemoryBytes: 256 << 20, CPUs: 1.5}, 256, 256<<20 + QEMUOverheadBytes, dryexec.DefaultPids + qemuThreads, 1.5},
		{dryexec.Limits{MemoryBytes: 64 << 20, Pids: 100}, 128, 128<<20 + QEMUOverheadBytes, 100 + qemuThreads, 0},
		{dryexec.Limits{}, 512, max(def, 512<<20) + QEMUOverheadBytes, dryexec.DefaultPids + qemuThreads, 0},
		{dryexec.Limits{MemoryBytes: -1, Pids: -1}, 512, -1, -1, 0},
	} {
		got := hostLimits(c.l, c.memMB)
		if got.MemoryBytes != c.mem || got.Pids != c.pids || got.CPUs != c.cpus {
			t.Errorf("hostLimits(%+v, %d) = %+v, want memory %d pids %d cpus %g", c.l, c.memMB, got, c.mem, c.pids, c.cpus)
		}
	}
}
