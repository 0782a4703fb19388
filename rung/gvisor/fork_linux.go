package gvisor

import (
	"context"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/wire"
)

var _ dryexec.SandboxForker[wire.SessionStart, wire.Fork, wire.Forked, wire.ForkAdopt] = (*sessionSandbox)(nil)

// PrepareFork implements dryexec.SandboxForker: the workspace is a tmpfs
// in this sandbox's gVisor kernel (the sentry's memory), which no other
// sandbox can mount, so there is no layer to share as on ns. The guest
// instead streams the workspace and its baseline to the host (Stream),
// every other process of the session stopped meanwhile, and the host
// pushes them into each branch.
func (s *sessionSandbox) PrepareFork(n int, req *wire.Fork) error {
	req.N, req.Stream = n, true
	return nil
}

// DropFork implements dryexec.SandboxForker: a fork leaves nothing here.
func (s *sessionSandbox) DropFork() {}

// OpenFork implements dryexec.SandboxForker: a new gvisor session sandbox
// (its own runsc, cgroup, masks and netsim), into which the host pushes
// the parent's trees before its adopt.
func (s *sessionSandbox) OpenFork(ctx context.Context, spec dryexec.SandboxSpec, _ *wire.Forked, _ int, _ *wire.ForkAdopt) (dryexec.Sandbox[wire.SessionStart], error) {
	return s.r.OpenSandbox(ctx, spec)
}
