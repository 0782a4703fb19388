package linuxns

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/procfs"
	"github.com/dryexec/dryexec/internal/testreq"
)

// BenchmarkColdTrialTrue is one cold trial of /bin/true, everything on
// (seccomp with its supervisor, Landlock, memory tracing): run it on a tree
// without the containment to see what it costs (docs/containment.md).
func BenchmarkColdTrialTrue(b *testing.B) {
	testreq.Need(b, testreq.NS, (&Rung{}).Available(context.Background()))
	dir := b.TempDir()
	r := &Rung{}
	for b.Loop() {
		spec := dryexec.TrialSpec{Action: dryexec.Action{Argv: []string{"/bin/true"}, Cwd: dir, Env: testPath}}
		if _, err := r.Trial(context.Background(), spec); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWarmTrialTrue is a pooled trial of /bin/true with the full delta,
// against fork+exec of /bin/true in the same run. Each trial waits (outside
// the timer) until the pool is full, settled and quiet (the last trial's
// teardown and the refill done, the new sandbox's command stub started): this is a trial's latency when trials come no faster than
// the pool refills, one sandbox per cold-start time, as in an agent's loop
// where each action follows a model call. guest-faults/op counts the page
// faults the trial's guest takes from the trial's start to its report
// (docs/benchmarks.md: each is ≈ 11 µs on a paravirtualised VM).
func BenchmarkWarmTrialTrue(b *testing.B) {
	testreq.Need(b, testreq.NS, (&Rung{}).Available(context.Background()))
	dir := b.TempDir()
	b.Run("pool", func(b *testing.B) {
		// The guest's faults are read when the rung has the whole report
		// ("done"): the guest is torn down only after the trial returns.
		guest, faults := 0, int64(0)
		r := &Rung{Trace: func(phase string) {
			if phase == "done" {
				n, _ := procfs.MinorFaults(guest)
				faults += n
			}
		}}
		p, err := NewPool(context.Background(), r, PoolOptions{Size: 1, Spec: dryexec.TrialSpec{Action: dryexec.Action{Cwd: dir}}})
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		spec := dryexec.TrialSpec{Action: dryexec.Action{Argv: []string{"/bin/true"}, Cwd: dir, Env: testPath}}
		for b.Loop() {
			b.StopTimer()
			for s := p.Stats(); s.Ready < 1 || s.Settled < s.Ready || s.Busy > 0; s = p.Stats() {
				if s.Failed > 0 {
					b.Fatal(s.LastError)
				}
				time.Sleep(time.Millisecond)
			}
			p.w.Each(func(t *trial) { guest = t.cmd.Process.Pid })
			n, _ := procfs.MinorFaults(guest)
			faults -= n
			b.StartTimer()
			if _, err := p.Trial(context.Background(), spec); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(faults)/float64(b.N), "guest-faults/op")
		if s := p.Stats(); s.Misses != 0 {
			b.Fatalf("%d trials ran cold", s.Misses)
		}
	})
	b.Run("fork+exec", func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
