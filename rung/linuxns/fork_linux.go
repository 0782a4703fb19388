package linuxns

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/wire"
)

var _ dryexec.SandboxForker[wire.SessionStart, wire.Fork, wire.Forked, wire.ForkAdopt] = (*sessionSandbox)(nil)

// PrepareFork implements dryexec.SandboxForker: the ns guest freezes its
// upper as a layer and shares its stack, so nothing is made beforehand.
func (s *sessionSandbox) PrepareFork(n int, req *wire.Fork) error {
	req.N = n
	return nil
}

// DropFork implements dryexec.SandboxForker.
func (s *sessionSandbox) DropFork() {}

// OpenFork implements dryexec.SandboxForker: a new sandbox (its own
// namespaces, cgroup, masks and netsim) whose guest is handed the parent's
// frozen layers as descriptors, opened here through the parent guest's
// /proc/PID/fd: detached mounts of the layers on the parent's scratch tmpfs,
// which the branch's guest attaches in its own mount namespace; they hold
// that tmpfs for as long as the branch needs them, whatever becomes of the
// parent.
func (s *sessionSandbox) OpenFork(ctx context.Context, spec dryexec.SandboxSpec, forked *wire.Forked, i int, adopt *wire.ForkAdopt) (dryexec.Sandbox[wire.SessionStart], error) {
	if i < 0 || i >= len(forked.Layers) {
		return nil, fmt.Errorf("%w: no layers for branch %d", dryexec.ErrGuest, i)
	}
	pid := strconv.Itoa(s.cmd.Process.Pid)
	var layers []*os.File
	defer func() {
		for _, f := range layers {
			f.Close()
		}
	}()
	for _, l := range forked.Layers[i] {
		fd, err := unix.Open("/proc/"+pid+"/"+l, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("%w: opening the parent's layer %s: %v", dryexec.ErrGuest, l, err)
		}
		layers = append(layers, os.NewFile(uintptr(fd), l))
	}
	sb, first, err := s.r.openSandbox(ctx, spec, layers)
	if err != nil {
		return nil, err
	}
	adopt.Lowers = nil
	for i := range layers {
		adopt.Lowers = append(adopt.Lowers, first+i)
	}
	adopt.OriginLayers = forked.BaselineLayers
	return sb, nil
}
