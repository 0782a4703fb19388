package host

import (
	"context"
	"fmt"
	"os"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/wire"
)

var _ dryexec.SandboxForker[wire.SessionStart, wire.Fork, wire.Forked, wire.ForkAdopt] = (*sandbox)(nil)

// PrepareFork implements dryexec.SandboxForker: a scratch dir for each
// branch, which the parent's guest fills with copies of its workspace (twice:
// the branch's workspace and its baseline, the fork point) and of its
// baseline (the branch's origin). With no layers to share, a fork here costs
// a copy of the tree (io.Copy: copy_file_range, so a reflink where the
// filesystem has them).
func (s *sandbox) PrepareFork(n int, req *wire.Fork) error {
	s.DropFork()
	req.N = n
	for range n {
		b, err := s.r.newScratch()
		if err != nil {
			s.DropFork()
			return err
		}
		if err := os.Mkdir(b.origin, 0o755); err != nil {
			os.RemoveAll(b.tmp)
			s.DropFork()
			return err
		}
		s.forks = append(s.forks, b)
		req.Copies = append(req.Copies, wire.ForkCopy{Workspace: b.ws, Baseline: b.base, Origin: b.origin})
	}
	return nil
}

// OpenFork implements dryexec.SandboxForker: branch i's guest over the
// copies.
func (s *sandbox) OpenFork(_ context.Context, spec dryexec.SandboxSpec, _ *wire.Forked, i int, adopt *wire.ForkAdopt) (dryexec.Sandbox[wire.SessionStart], error) {
	if i < 0 || i >= len(s.forks) || s.forks[i] == nil {
		return nil, fmt.Errorf("host: no prepared branch %d", i)
	}
	if len(spec.Net) > 0 {
		return nil, &dryexec.IsolationUnavailableError{Rung: Name, Missing: "network interception (the host rung shares the host's network; use the ns rung for net)"}
	}
	b := s.forks[i]
	s.forks[i] = nil
	if err := s.r.start(b); err != nil {
		return nil, err
	}
	adopt.Origin = b.origin
	return b, nil
}

// DropFork implements dryexec.SandboxForker: the scratch dirs of branches
// never opened go.
func (s *sandbox) DropFork() {
	for _, b := range s.forks {
		if b != nil {
			os.RemoveAll(b.tmp)
		}
	}
	s.forks = nil
}
