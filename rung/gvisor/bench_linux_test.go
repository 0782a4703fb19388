package gvisor

import (
	"context"
	"testing"

	"github.com/dryexec/dryexec/internal/rungbench"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/linuxns"
)

// BenchmarkColdTrial times a cold /bin/true trial on gvisor and on ns,
// `runsc do /bin/true` and bwrap's sandboxed /bin/true, interleaved in each
// iteration so that all four meet the same machine, and reports each
// candidate's median (ms) and gvisor's ratio to the others:
//
//	go test -run '^$' -bench ColdTrial -benchtime 20x ./rung/gvisor
func BenchmarkColdTrial(b *testing.B) {
	testreq.Need(b, testreq.GVisor, (&Rung{}).Available(context.Background()))
	runsc, err := FindRunsc("")
	testreq.Needf(b, testreq.GVisor, "runsc", err)
	bwrap := testreq.NeedTool(b, "bwrap")
	state := b.TempDir()
	cands := []rungbench.Candidate{
		rungbench.Trial(b, &Rung{}),
		rungbench.Trial(b, &linuxns.Rung{}),
		rungbench.Command("runsc_do", state, rungbench.RunscDoArgv(runsc, state, "/bin/true")...),
		rungbench.Command("bwrap", state, rungbench.BwrapArgv(bwrap, "/bin/true")...),
	}
	med := rungbench.Interleave(b, cands)
	for i, c := range cands[1:] {
		b.ReportMetric(med[0]/med[i+1], "gvisor/"+c.Name)
	}
}
