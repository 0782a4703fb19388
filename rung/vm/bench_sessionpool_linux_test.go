package vm_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/rungbench"
	"github.com/dryexec/dryexec/rung/linuxns"
	"github.com/dryexec/dryexec/rung/vm"
	"github.com/dryexec/dryexec/session"
)

// BenchmarkSessionPool times a session taken from a session pool (Open, its
// first exec of `true`, Close) on vm against ns, interleaved; before each,
// untimed, the pool is waited for until it has a session ready and opens
// nothing. A vm session from the pool skips the VM's boot, the 9p view and
// the session guest's start:
//
//	DRYEXEC_TEST_VM=1 go test -run '^$' -bench SessionPool -benchtime 3x ./rung/vm
func BenchmarkSessionPool(b *testing.B) {
	requireVMSession(b)
	if err := (&linuxns.Rung{}).Available(context.Background()); err != nil {
		b.Skip(err)
	}
	ctx := context.Background()
	var cands []rungbench.Candidate
	var pools []*session.Pool
	// Before every candidate, untimed, both pools are ready and quiet: a
	// refill never runs beside a timed candidate.
	quiet := func() error {
		for _, p := range pools {
			if err := rungbench.WaitQuiet(func() (int, int) { s := p.Stats(); return s.Ready, s.Busy })(); err != nil {
				return err
			}
		}
		return nil
	}
	for _, rn := range []string{vm.Name, "ns"} {
		p := session.NewPool(ctx, session.PoolOptions{Size: 1, IdleTimeout: -1, Template: session.Options{Rung: rn}})
		defer p.Close()
		pools = append(pools, p)
		cands = append(cands, rungbench.Candidate{Name: rn + "_session_pool_hit", Prep: quiet,
			Run: func() error {
				s, err := p.Open(ctx, session.Options{Rung: rn})
				if err != nil {
					return err
				}
				defer s.Close()
				res, err := s.Shell(ctx, "true", 5*time.Minute)
				if err == nil && res.ExitCode != 0 {
					err = fmt.Errorf("exit %d", res.ExitCode)
				}
				return err
			}})
	}
	med := rungbench.Interleave(b, cands)
	b.ReportMetric(med[0]/med[1], "vm/ns")
	for i, p := range pools {
		s := p.Stats()
		b.ReportMetric(float64(s.Misses), cands[i].Name[:2]+"_misses")
	}
}
