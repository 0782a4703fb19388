//go:build linux

package main

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dryexec/dryexec/rung/linuxns"
)

// trialGroup: a cold trial of /bin/true, through the CLI and in-process,
// against the same command under bwrap, under unshare, and bare.
func trialGroup(e *env) ([]group, error) {
	var t0 time.Time
	traced := &linuxns.Rung{Trace: func(p string) { e.phases[p] = append(e.phases[p], time.Since(t0)) }}
	return []group{{key: "trial", title: "Cold trial of /bin/true vs baselines", unit: unitMS, bases: []int{2, 3}, cands: []candidate{
		{name: "dryexec run -- /bin/true (CLI process, full delta)", run: timed(e.command(e.empty, e.bin, "run", "--no-store", "--json", "--", "/bin/true"))},
		{name: "Rung.Trial(/bin/true) in-process (library/daemon path)", run: timed(func() error { t0 = time.Now(); return e.trial(traced, e.empty, "/bin/true") })},
		{name: "bwrap --ro-bind / / --unshare-all --dev /dev --proc /proc /bin/true", run: timed(e.command(e.empty, "bwrap", "--ro-bind", "/", "/", "--unshare-all", "--dev", "/dev", "--proc", "/proc", "/bin/true"))},
		{name: "unshare -m -p -f -i -u -n /bin/true", run: timed(e.command(e.empty, "unshare", "-m", "-p", "-f", "-i", "-u", "-n", "/bin/true"))},
		{name: "fork+exec /bin/true", run: timed(e.command(e.empty, "/bin/true"))},
	}}}, nil
}

// throughputTrials is how many trials one throughput sample runs, spread
// over the workers.
const throughputTrials = 8

// throughputGroup: in-process trials per second with 1, 2 and 4 running at
// once (this machine has 2 CPUs: 4 shows the cost of oversubscription).
func throughputGroup(e *env) ([]group, error) {
	r := &linuxns.Rung{}
	at := func(workers int) func() (float64, error) {
		return func() (float64, error) {
			jobs := make(chan struct{}, throughputTrials)
			for range throughputTrials {
				jobs <- struct{}{}
			}
			close(jobs)
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			start := time.Now()
			for range workers {
				wg.Go(func() {
					for range jobs {
						if err := e.trial(r, e.empty, "/bin/true"); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			close(errs)
			if err := <-errs; err != nil {
				return 0, err
			}
			return throughputTrials / elapsed.Seconds(), nil
		}
	}
	g := group{key: "throughput", title: fmt.Sprintf("Trials per second (Rung.Trial of /bin/true, %d per sample)", throughputTrials),
		unit: rate("trials/s"), bases: []int{0}}
	for _, w := range []int{1, 2, 4} {
		g.cands = append(g.cands, candidate{name: fmt.Sprintf("concurrency %d", w), label: "concurrency 1", run: at(w)})
	}
	return []group{g}, nil
}

// diffGroup: a trial that writes one file in trees of 0 … cfg.tree files:
// the whole trial, and the diff phase alone (from "exit", the command gone,
// to "done", the delta built). The walk reads only the upper dirs, so both
// should be flat; the ns session diff in the sessions group is the same
// question for a long-lived workspace.
func diffGroup(e *env) ([]group, error) {
	sizes := []int{0, 1000, 10000, e.cfg.tree}
	slices.Sort(sizes)
	sizes = slices.Compact(sizes)
	whole := group{key: "diff", title: "Diff vs tree size: a whole trial writing 1 file", unit: unitMS, bases: []int{0}}
	phase := group{key: "diff", title: "Diff vs tree size: its diff phase alone (from the command's exit to the delta)", unit: unitMS, bases: []int{0}}
	for _, n := range sizes {
		dir, err := e.tree(n)
		if err != nil {
			return nil, err
		}
		plain := &linuxns.Rung{}
		var exit, done time.Time
		traced := &linuxns.Rung{Trace: func(p string) {
			switch p {
			case "exit":
				exit = time.Now()
			case "done":
				done = time.Now()
			}
		}}
		whole.cands = append(whole.cands, candidate{name: fmt.Sprintf("%d-file tree", n), label: "empty tree",
			run: timed(func() error { return e.trial(plain, dir, "sh", "-c", "echo x > d0/new") })})
		phase.cands = append(phase.cands, candidate{name: fmt.Sprintf("%d-file tree", n), label: "empty tree",
			run: func() (float64, error) {
				err := e.trial(traced, dir, "sh", "-c", "echo x > d0/new")
				return msOf(done.Sub(exit)), err
			}})
	}
	return []group{whole, phase}, nil
}
