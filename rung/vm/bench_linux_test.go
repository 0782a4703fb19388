package vm

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
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
	dir := b.TempDir()
	spec := dryexec.TrialSpec{Action: dryexec.Action{Argv: []string{"/bin/true"}, Cwd: dir, Env: testPath}}
	trial := func(r dryexec.Rung) func() error {
		return func() error {
			d, err := r.Trial(context.Background(), spec)
			if err == nil && d.Process.ExitCode != 0 {
				b.Fatalf("%s: exit %d", r.Name(), d.Process.ExitCode)
			}
			return err
		}
	}
	cands := []struct {
		name string
		run  func() error
	}{
		{"vm", trial(r)},
		{"vm_boot", func() error { _, err := r.Boot(context.Background()); return err }},
		{"ns", trial(&linuxns.Rung{})},
	}
	if (&gvisor.Rung{}).Available(context.Background()) == nil {
		cands = append(cands, struct {
			name string
			run  func() error
		}{"gvisor", trial(&gvisor.Rung{})})
	}
	times := make([][]time.Duration, len(cands))
	for _, c := range cands { // warm the page cache
		if err := c.run(); err != nil {
			b.Fatalf("%s: %v", c.name, err)
		}
	}
	b.ResetTimer()
	for range b.N {
		for i, c := range cands {
			t0 := time.Now()
			if err := c.run(); err != nil {
				b.Fatalf("%s: %v", c.name, err)
			}
			times[i] = append(times[i], time.Since(t0))
		}
	}
	b.StopTimer()
	med := make([]float64, len(cands))
	for i, c := range cands {
		slices.Sort(times[i])
		med[i] = float64(times[i][len(times[i])/2].Microseconds()) / 1000
		b.ReportMetric(med[i], c.name+"-ms")
	}
	b.ReportMetric(med[0]/med[2], "vm/ns")
}
