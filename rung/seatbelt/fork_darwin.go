package seatbelt

import (
	"context"
	"fmt"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/wire"
)

// Never run on a Mac: compiled and vetted for darwin; newSessionDirs, which
// makes a branch's dirs, is tested on Linux with a plain copy.

var _ dryexec.SandboxForker[wire.SessionStart, wire.Fork, wire.Forked, wire.ForkAdopt] = (*sandbox)(nil)

// PrepareFork implements dryexec.SandboxForker: each branch's dirs, cloned
// (clonefile) by dryexec from the parent's workspace and baseline while
// the session runs nothing, before the parent's guest is asked to fork.
// The request names no copies, so that guest (scan staging) copies
// nothing: a clone costs metadata only, where the guest's copy reads every
// byte. As on the host rung, a process the session left running in the
// background may write during the clone, and is not carried into the
// branch: a branch starts with a guest of its own and no process of the
// parent's.
func (s *sandbox) PrepareFork(n int, req *wire.Fork) error {
	s.DropFork()
	req.N = n
	for range n {
		d, err := newSessionDirs(&forkSource{ws: s.ws, base: s.base, clone: cloneTree})
		if err != nil {
			s.DropFork()
			return fmt.Errorf("seatbelt: cloning the session for a branch: %w", err)
		}
		s.forks = append(s.forks, d)
	}
	return nil
}

// OpenFork implements dryexec.SandboxForker: branch i's guest, under a
// profile of its own (its own dirs, netsim and tag), over its clones; its
// origin is read, never written, by the branch.
func (s *sandbox) OpenFork(ctx context.Context, spec dryexec.SandboxSpec, _ *wire.Forked, i int, adopt *wire.ForkAdopt) (dryexec.Sandbox[wire.SessionStart], error) {
	if i < 0 || i >= len(s.forks) || s.forks[i] == nil {
		return nil, fmt.Errorf("seatbelt: no prepared branch %d", i)
	}
	if err := checkSandbox(spec); err != nil {
		return nil, err
	}
	d := s.forks[i]
	s.forks[i] = nil
	b, err := s.r.open(ctx, spec, d)
	if err != nil {
		return nil, err
	}
	adopt.Origin = d.origin
	return b, nil
}

// DropFork implements dryexec.SandboxForker: the dirs of branches never
// opened go.
func (s *sandbox) DropFork() {
	for _, d := range s.forks {
		if d != nil {
			d.remove()
		}
	}
	s.forks = nil
}
