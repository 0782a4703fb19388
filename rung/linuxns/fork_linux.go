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
// namespaces, cgroup, masks and netsim), handed the parent's frozen layers
// as AdoptFork hands them to one opened ahead.
func (s *sessionSandbox) OpenFork(ctx context.Context, spec dryexec.SandboxSpec, forked *wire.Forked, i int, adopt *wire.ForkAdopt) (dryexec.Sandbox[wire.SessionStart], error) {
	sb, err := s.r.OpenSandbox(ctx, spec)
	if err != nil {
		return nil, err
	}
	if err := s.AdoptFork(sb, forked, i, adopt); err != nil {
		sb.Close()
		return nil, err
	}
	return sb, nil
}

// AdoptFork sends branch i's share of the parent's frozen layers to into, a
// session sandbox of this rung already open (a warm one, opened before the
// fork, or OpenFork's), over its fork socket, and fills adopt for its guest.
// Each layer is opened here through the parent guest's /proc/PID/fd: a
// detached mount of the layer on the parent's scratch tmpfs, which the
// branch's guest attaches in its own mount namespace; it holds that tmpfs
// for as long as the branch needs it, whatever becomes of the parent.
func (s *sessionSandbox) AdoptFork(into dryexec.Sandbox[wire.SessionStart], forked *wire.Forked, i int, adopt *wire.ForkAdopt) error {
	b, ok := into.(*sessionSandbox)
	if !ok || b.forkSock == nil {
		return fmt.Errorf("%w: a branch of an ns session must be an ns session sandbox (got %T)", dryexec.ErrGuest, into)
	}
	if i < 0 || i >= len(forked.Layers) {
		return fmt.Errorf("%w: no layers for branch %d", dryexec.ErrGuest, i)
	}
	pid := strconv.Itoa(s.cmd.Process.Pid)
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for _, l := range forked.Layers[i] {
		fd, err := unix.Open("/proc/"+pid+"/"+l, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("%w: opening the parent's layer %s: %v", dryexec.ErrGuest, l, err)
		}
		fds = append(fds, fd)
	}
	// One message (a seqpacket socket keeps it whole): the guest reads it
	// at fork.adopt. A stack is flattened long before SCM_MAX_FD (253).
	if err := unix.Sendmsg(int(b.forkSock.Fd()), []byte{'L'}, unix.UnixRights(fds...), nil, 0); err != nil {
		return fmt.Errorf("%w: sending the layers to the branch: %v", dryexec.ErrGuest, err)
	}
	adopt.Layers = len(fds)
	adopt.OriginLayers = forked.BaselineLayers
	return nil
}

// forkSocket is the pair a session sandbox gets its branches' layers over
// (wire.SessionStart.ForkFD): seqpacket, so that one send is one receive.
func forkSocket() (host, guest *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("fork socket: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "fork"), os.NewFile(uintptr(fds[1]), "guest-fork"), nil
}
