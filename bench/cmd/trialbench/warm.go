//go:build linux

package main

import (
	"fmt"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/rung/linuxns"
)

// warmGroup: a trial of /bin/true in a sandbox the pool prepared ahead
// (linuxns.Pool), against fork+exec of the same command and bwrap's cold
// sandbox and, for scale, a cold Rung.Trial. Before each pooled trial, unmeasured, the benchmark waits
// until the pool has a sandbox ready and no background work (the previous
// trial's teardown, a refill) in flight, as linuxns's BenchmarkWarmTrialTrue
// does: the row is the warm path on a quiet pool; the pool's hits and misses
// are reported under the table.
func warmGroup(e *env) ([]group, error) {
	spec := dryexec.TrialSpec{Action: dryexec.Action{Argv: []string{"/bin/true"}, Cwd: e.empty, Env: benchEnv}}
	pool, err := linuxns.NewPool(e.ctx, &linuxns.Rung{}, linuxns.PoolOptions{Size: 2, IdleTimeout: -1, Spec: spec})
	if err != nil {
		return nil, err
	}
	ready := func() error {
		deadline := time.Now().Add(10 * time.Second)
		for st := pool.Stats(); st.Ready == 0 || st.Settled < st.Ready || st.Busy > 0; st = pool.Stats() {
			if time.Now().After(deadline) {
				return fmt.Errorf("the pool not ready and quiet after 10s: %+v", pool.Stats())
			}
			time.Sleep(time.Millisecond)
		}
		return nil
	}
	// The stats are read as the group ends, before the pool is closed.
	var st linuxns.PoolStats
	g := group{key: "warm", title: "Warm (pooled) trial of /bin/true vs fork+exec and bwrap", unit: unitMS, bases: []int{0, 1},
		close: func() { st = pool.Stats(); pool.Close() }}
	g.cands = []candidate{
		{name: "fork+exec /bin/true", run: timed(e.command(e.empty, "/bin/true"))},
		// bwrap's cold sandbox, the core issue's baseline, in this run too:
		// the pool is how a trial with all the containment on compares.
		{name: "bwrap --ro-bind / / --unshare-all --dev /dev --proc /proc /bin/true", run: timed(e.command(e.empty, "bwrap", "--ro-bind", "/", "/", "--unshare-all", "--dev", "/dev", "--proc", "/proc", "/bin/true"))},
		{name: "Pool.Trial(/bin/true), a sandbox ready (full delta)", label: "pooled", prep: ready,
			run: timed(func() error { return checkDelta(pool.Trial(e.ctx, spec)) })},
		{name: "Rung.Trial(/bin/true), cold", run: timed(func() error { return e.trial(&linuxns.Rung{}, e.empty, "/bin/true") })},
	}
	g.extra = func() string {
		return fmt.Sprintf("Pool: %d hits, %d misses (a miss ran cold), %d failed preparations; %.1f MiB PSS for the %d sandboxes ready at the end (the pool's own measure of what keeping them costs).",
			st.Hits, st.Misses, st.Failed, float64(st.IdlePSSBytes)/(1<<20), st.Ready)
	}
	return []group{g}, nil
}
