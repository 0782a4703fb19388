package gvisor

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
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
	command := func(argv ...string) func() error {
		return func() error {
			c := exec.Command(argv[0], argv[1:]...)
			c.Dir, c.Stdout, c.Stderr = state, nil, os.Stderr
			return c.Run()
		}
	}
	cands := []struct {
		name string
		run  func() error
	}{
		{"gvisor", trial(&Rung{})},
		{"ns", trial(&linuxns.Rung{})},
		{"runsc_do", command(runsc, "--root", state, "--network=none", "--ignore-cgroups", "do", "/bin/true")},
		{"bwrap", command(bwrap, "--ro-bind", "/", "/", "--unshare-all", "--dev", "/dev", "--proc", "/proc", "/bin/true")},
	}
	times := make([][]time.Duration, len(cands))
	for _, c := range cands { // warm the page cache and runsc's first start
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
	for i, c := range cands[1:] {
		b.ReportMetric(med[0]/med[i+1], "gvisor/"+c.name)
	}
}
