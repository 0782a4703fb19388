package rungbench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
)

// Candidate is one thing a benchmark times.
type Candidate struct {
	Name string
	Run  func() error
	// Prep, when set, runs before each Run, untimed (waiting for a warm
	// pool to have a sandbox ready and be quiet).
	Prep func() error
}

// Interleave runs every candidate once (to warm the page cache and first
// starts), then b.N times each, interleaved in each iteration so that all
// meet the same machine; it reports each candidate's median (NAME-ms) and
// returns the medians in ms, in cands' order.
func Interleave(b *testing.B, cands []Candidate) []float64 {
	times := make([][]time.Duration, len(cands))
	for _, c := range cands {
		if err := c.prep(); err != nil {
			b.Fatalf("%s: %v", c.Name, err)
		}
		if err := c.Run(); err != nil {
			b.Fatalf("%s: %v", c.Name, err)
		}
	}
	b.ResetTimer()
	for range b.N {
		for i, c := range cands {
			b.StopTimer()
			if err := c.prep(); err != nil {
				b.Fatalf("%s: %v", c.Name, err)
			}
			b.StartTimer()
			t0 := time.Now()
			if err := c.Run(); err != nil {
				b.Fatalf("%s: %v", c.Name, err)
			}
			times[i] = append(times[i], time.Since(t0))
		}
	}
	b.StopTimer()
	med := make([]float64, len(cands))
	for i, c := range cands {
		slices.Sort(times[i])
		med[i] = float64(times[i][len(times[i])/2].Microseconds()) / 1000
		b.ReportMetric(med[i], c.Name+"-ms")
	}
	return med
}

func (c Candidate) prep() error {
	if c.Prep == nil {
		return nil
	}
	return c.Prep()
}

// WaitQuiet is a Prep for a warm pool whose stats says how many sandboxes
// are ready and how much work is in flight: it waits (up to 10 minutes: VMs
// boot under TCG) until one is ready and nothing is being prepared or torn
// down, so that the candidate meets a pool as a caller after a pause would.
func WaitQuiet(stats func() (ready, busy int)) func() error {
	return func() error {
		deadline := time.Now().Add(10 * time.Minute)
		for ready, busy := stats(); ready == 0 || busy > 0; ready, busy = stats() {
			if time.Now().After(deadline) {
				return fmt.Errorf("the pool not ready and quiet after 10 minutes")
			}
			time.Sleep(10 * time.Millisecond)
		}
		return nil
	}
}

// Trial is a candidate running a /bin/true trial in a fresh dir on r; a
// trial whose command does not exit 0 fails the benchmark.
func Trial(b *testing.B, r dryexec.Rung) Candidate {
	dir := b.TempDir()
	spec := dryexec.TrialSpec{Action: dryexec.Action{Argv: []string{"/bin/true"}, Cwd: dir,
		Env: map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}}}
	return Candidate{Name: r.Name(), Run: func() error {
		d, err := r.Trial(context.Background(), spec)
		if err == nil && d.Process.ExitCode != 0 {
			b.Fatalf("%s: exit %d", r.Name(), d.Process.ExitCode)
		}
		return err
	}}
}

// Command is a candidate running argv from dir, its errors to stderr.
func Command(name, dir string, argv ...string) Candidate {
	return Candidate{Name: name, Run: func() error {
		c := exec.Command(argv[0], argv[1:]...)
		c.Dir, c.Stdout, c.Stderr = dir, nil, os.Stderr
		return c.Run()
	}}
}

// BwrapArgv is bwrap's sandboxed argv: the host read-only, every namespace
// new: the cheapest sandbox a trial is compared with.
func BwrapArgv(bwrap string, argv ...string) []string {
	return append([]string{bwrap, "--ro-bind", "/", "/", "--unshare-all", "--dev", "/dev", "--proc", "/proc"}, argv...)
}

// RunscDoArgv is `runsc do`'s argv with its state in state: gVisor's own
// one-shot sandbox of the host's root, no network.
func RunscDoArgv(runsc, state string, argv ...string) []string {
	return append([]string{runsc, "--root", state, "--network=none", "--ignore-cgroups", "do"}, argv...)
}
