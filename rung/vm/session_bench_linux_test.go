package vm_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/dryexec/dryexec/rung/linuxns"
	"github.com/dryexec/dryexec/rung/vm"
	"github.com/dryexec/dryexec/session"
)

// BenchmarkSession times, on vm and on ns, interleaved in each iteration so
// that both meet the same machine: a session's start (session.Open to its
// first exec served, `true`: on vm the VM's boot, the 9p view and the
// guest's start) and the round trip of an exec after it (`true`, 5 per
// session). It reports each median (ms) and vm's ratios to ns:
//
//	DRYEXEC_TEST_VM=1 go test -run '^$' -bench Session -benchtime 5x ./rung/vm
func BenchmarkSession(b *testing.B) {
	requireVMSession(b)
	if err := (&linuxns.Rung{}).Available(context.Background()); err != nil {
		b.Skip(err)
	}
	rungs := []string{vm.Name, "ns"}
	const execs = 5
	start := map[string][]time.Duration{}
	exec := map[string][]time.Duration{}
	round := func(r string) {
		ctx := context.Background()
		t0 := time.Now()
		s, err := session.Open(ctx, session.Options{Rung: r, Net: []string{"none"}})
		if err != nil {
			b.Fatalf("%s: %v", r, err)
		}
		defer s.Close()
		if res, err := s.Shell(ctx, "true", time.Minute); err != nil || res.ExitCode != 0 {
			b.Fatalf("%s: first exec: %v %+v", r, err, res)
		}
		start[r] = append(start[r], time.Since(t0))
		for range execs {
			t1 := time.Now()
			if res, err := s.Shell(ctx, "true", time.Minute); err != nil || res.ExitCode != 0 {
				b.Fatalf("%s: exec: %v %+v", r, err, res)
			}
			exec[r] = append(exec[r], time.Since(t1))
		}
	}
	// One untimed round each: the page cache, the initramfs, the probe.
	for _, r := range rungs {
		round(r)
	}
	clear(start)
	clear(exec)
	b.ResetTimer()
	for range b.N {
		for _, r := range rungs {
			round(r)
		}
	}
	b.StopTimer()
	med := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	for _, r := range rungs {
		b.ReportMetric(med(start[r]), r+"_start-ms")
		b.ReportMetric(med(exec[r]), r+"_exec-ms")
	}
	b.ReportMetric(med(start[vm.Name])/med(start["ns"]), "vm/ns_start")
	b.ReportMetric(med(exec[vm.Name])/med(exec["ns"]), "vm/ns_exec")
}
