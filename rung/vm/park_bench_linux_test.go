package vm_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/dryexec/dryexec/rung/vm"
	"github.com/dryexec/dryexec/session"
)

// BenchmarkPark measures, in each iteration, a cold vm session's start (open
// to its first exec served), its park (the guest lets go of the view, the
// VM's state saved, QEMU ended), and its resume (a restored VM to its first
// exec served), and reports their medians and resume/start: what a parked
// session saves over opening a new one.
func BenchmarkPark(b *testing.B) {
	requireVMSession(b)
	ctx := b.Context()
	var start, park, resume []time.Duration
	var bytes int64
	for b.Loop() {
		t0 := time.Now()
		s, err := session.Open(ctx, session.Options{Rung: "vm"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Shell(ctx, "true", time.Minute); err != nil {
			b.Fatal(err)
		}
		start = append(start, time.Since(t0))
		dir := b.TempDir()
		t1 := time.Now()
		p, err := s.Park(ctx, dir)
		if err != nil {
			s.Close()
			b.Fatal(err)
		}
		park = append(park, time.Since(t1))
		bytes = parkedBytes(b, dir)
		t2 := time.Now()
		s2, err := session.Resume(ctx, p)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s2.Shell(ctx, "true", time.Minute); err != nil {
			b.Fatal(err)
		}
		resume = append(resume, time.Since(t2))
		s2.Close()
	}
	med := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	b.ReportMetric(med(start), "start-ms")
	b.ReportMetric(med(park), "park-ms")
	b.ReportMetric(med(resume), "resume-ms")
	b.ReportMetric(med(resume)/med(start), "resume/start")
	b.ReportMetric(float64(bytes)/(1<<20), "state-MiB")
}

func parkedBytes(b *testing.B, dir string) int64 {
	st, err := os.Stat(filepath.Join(dir, vm.ParkFile))
	if err != nil {
		b.Fatal(err)
	}
	return st.Size()
}
