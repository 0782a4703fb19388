package vm

import (
	"context"
	"testing"

	"github.com/dryexec/dryexec/internal/rungbench"
	"github.com/dryexec/dryexec/rung/gvisor"
	"github.com/dryexec/dryexec/rung/linuxns"
)

// BenchmarkColdTrial times a cold /bin/true trial on vm, ns and gvisor, and
// QEMU's own boot of the same VM to its init's hello (no view, no command:
// the floor of a vm trial), interleaved in each iteration so that all meet
// the same machine; it reports each candidate's median (ms) and vm's ratio
// to ns:
//
//	go test -run '^$' -bench ColdTrial -benchtime 5x ./rung/vm
func BenchmarkColdTrial(b *testing.B) {
	r := &Rung{GuestExe: staticGuest(b)}
	if err := r.Available(context.Background()); err != nil {
		b.Skip(err)
	}
	cands := []rungbench.Candidate{
		rungbench.Trial(b, r),
		{Name: "vm_boot", Run: func() error { _, err := r.Boot(context.Background()); return err }},
		rungbench.Trial(b, &linuxns.Rung{}),
	}
	if (&gvisor.Rung{}).Available(context.Background()) == nil {
		cands = append(cands, rungbench.Trial(b, &gvisor.Rung{}))
	}
	med := rungbench.Interleave(b, cands)
	b.ReportMetric(med[0]/med[2], "vm/ns")
}
