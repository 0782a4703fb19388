package linuxns

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"slices"
	"sync"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/wire"
)

var _ dryexec.SessionRung[wire.SessionStart] = (*Rung)(nil)

// OpenSandbox implements dryexec.SessionRung: the session's guest in its own
// namespaces, over an overlay-staged workspace, with its cgroup (or
// rlimits), masks and netsim for as long as the sandbox lives.
func (r *Rung) OpenSandbox(ctx context.Context, spec dryexec.SandboxSpec) (dryexec.Sandbox[wire.SessionStart], error) {
	sb, err := r.openSandbox(ctx, spec)
	if err != nil {
		return nil, err // not a typed nil
	}
	return sb, nil
}

// openSandbox opens a session sandbox.
func (r *Rung) openSandbox(ctx context.Context, spec dryexec.SandboxSpec) (*sessionSandbox, error) {
	var mounts []wire.MountSpec
	var err error
	if spec.Image != nil {
		// The image's root instead of the host's: one overlay at "/", no
		// masks (nothing of the host is in the view).
		if err := checkImage(spec.Image); err != nil {
			return nil, err
		}
		mounts = []wire.MountSpec{{Path: "/"}}
	} else if mounts, err = Mounts(); err != nil {
		return nil, err
	}
	caDir, err := EnsureCA(spec.NetCADir)
	if err != nil {
		return nil, err
	}
	// The network first: a spec that cannot be parsed is the caller's error
	// before anything else is made, and mocks without a TUN device refuse
	// here. netsim makes itself ready while the guest starts (two process
	// starts: one after the other they were ≈ 20 ms of a 75 ms open here);
	// what it refuses then (Ready) ends the guest too.
	nw, err := StartNet(spec.Net, caDir, spec.ID)
	if err != nil {
		return nil, err
	}
	// netsim's CA key signs what the sandbox trusts: it stays masked whoever
	// opened the session (the daemon masks it too; a Go caller may not).
	masks := append(slices.Clone(spec.Masks), caDir)
	// dryexec's own state is hidden whatever the options say.
	var cover Cover
	if spec.Image == nil {
		if cover, err = ResolveCover(masks, spec.NoDefaultMasks, spec.OwnPaths); err != nil {
			nw.Close()
			return nil, err
		}
	}
	lim, err := r.NewLimiter(spec.ID, spec.Limits)
	if err != nil {
		nw.Close()
		return nil, err
	}
	ctrl, guestEnd, err := wire.SocketPair()
	if err != nil {
		lim.Close()
		nw.Close()
		return nil, err
	}
	defer guestEnd.Close()
	forkSock, guestFork, err := forkSocket()
	if err != nil {
		ctrl.Close()
		lim.Close()
		nw.Close()
		return nil, err
	}
	defer guestFork.Close()
	files := []*os.File{guestEnd, guestFork}
	forkFD := wire.CtrlFD + 1
	netFD := 0
	if f := nw.GuestFile(); f != nil {
		netFD = wire.CtrlFD + len(files)
		files = append(files, f)
	}
	// Each exec is a fresh fork of the guest's launcher thread. On cgroup
	// v1 the guest is born beside the session's groups and its launcher
	// enters them alone (startGuest's born), rather than the guest moved
	// into them, which waits for an RCU grace period; where that cannot be
	// done the guest is moved, its other threads leave the pids limit once
	// the session is up (Limiter.ShelterSupervisor, in Ready), and until
	// then the limit keeps cgroup.ShelterHeadroom of room.
	var born []int
	cmd, attached, err := r.startGuest(wire.RoleSession, files, lim, &born)
	if err == nil {
		if err = <-attached; err != nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}
	if err != nil {
		ctrl.Close()
		forkSock.Close()
		lim.Close()
		nw.Close()
		return nil, err
	}
	if err := nw.Ready(ctx); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		ctrl.Close()
		forkSock.Close()
		lim.Close()
		nw.Close()
		return nil, err
	}
	// The guest has its end of the hand-over socket: netsim waits for the
	// device, and ends when Close stops it (or the guest dies first).
	nw.Serve(ctx)
	ws := spec.Workspace
	if ws == "" {
		ws = "/workspace"
	}
	var layers []string
	if spec.Image != nil {
		layers = spec.Image.Layers
	}
	return &sessionSandbox{r: r, ctrl: ctrl, cmd: cmd, ws: ws, mounts: mounts, image: layers, cover: cover,
		lim: lim, watch: NewMaskWatch(), net: nw, netFD: netFD, forkSock: forkSock, forkFD: forkFD, born: born}, nil
}

// SandboxKey says what of the host a session sandbox opened now for spec
// would be built from (the host mount plan, the resolved masks): a pooled
// sandbox made from another is stale.
func (r *Rung) SandboxKey(spec dryexec.SandboxSpec) (string, error) {
	mounts, err := Mounts()
	if err != nil {
		return "", err
	}
	cover, err := ResolveCover(spec.Masks, spec.NoDefaultMasks, spec.OwnPaths)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(struct {
		M []wire.MountSpec
		K Cover
	}{mounts, cover})
	return string(b), err
}

// sessionSandbox is an ns session's guest and its containment: cgroup,
// masks and network.
type sessionSandbox struct {
	r      *Rung
	ctrl   *os.File
	cmd    *exec.Cmd
	ws     string
	mounts []wire.MountSpec
	image  []string // the image's layer dirs, lowest first; nil: the host's view
	cover  Cover
	lim    *Limiter
	watch  *MaskWatch
	net    *Net // alive until Close
	netFD  int  // the guest's end of the TUN hand-over socket (0: none)
	// forkSock is the host's end of the socket a branch's layers are sent
	// over (AdoptFork); forkFD the guest's.
	forkSock *os.File
	forkFD   int
	// born are the guest's fds of its launcher's cgroup files when it was
	// born beside its groups (wire.SessionStart.LauncherCgroups); nil when
	// it was moved into them.
	born  []int
	close sync.Once
}

func (s *sessionSandbox) Conn() io.ReadWriteCloser { return s.ctrl }
func (s *sessionSandbox) Workspace() string        { return s.ws }
func (s *sessionSandbox) GuestPID() int            { return s.cmd.Process.Pid }

func (s *sessionSandbox) Configure(start *wire.SessionStart) {
	host, _ := os.Hostname()
	start.Rung, start.Workspace = Name, s.ws
	start.Mounts, start.Hostname, start.Masks, start.Hidden = s.mounts, host, s.cover.Masks, s.cover.Hidden
	start.Image = s.image
	start.Rootless, start.CommandUserNS = os.Getuid() != 0, true
	start.CommandUID, start.CommandGID = os.Getuid(), os.Getgid()
	// Under the rlimit fallback each exec gets the pids limit; the guest
	// keeps more for its own threads (a bomb must not take them).
	start.CommandNPROC = s.lim.CommandNPROC()
	s.net.SetupSession(start, s.netFD)
	start.ForkFD = s.forkFD
	start.LauncherCgroups = s.born
}

// Ready shelters the guest's own threads from the pids limit and pins the
// masks, now that the view is built.
func (s *sessionSandbox) Ready() error {
	pid := s.cmd.Process.Pid
	if s.born == nil {
		if err := s.lim.ShelterSupervisor(pid); err != nil {
			return err
		}
	}
	return s.watch.Pin(pid, s.cover.Masks)
}

func (s *sessionSandbox) Violations() []dryexec.Violation {
	v, _ := s.lim.Violations()
	return append(v, s.watch.Check()...)
}

func (s *sessionSandbox) Warnings() []string {
	w := s.lim.Warnings()
	if mw := s.watch.Warning(); mw != "" {
		w = append(w, mw)
	}
	w = append(w, s.net.SessionWarnings()...)
	return w
}

// NetworkEnded says why the session's network ended early, or "".
func (s *sessionSandbox) NetworkEnded() string { return s.net.Ended() }

func (s *sessionSandbox) Network() []dryexec.NetworkEvent { return s.net.Log() }

// SyncNetwork returns once Network holds every event netsim has logged.
func (s *sessionSandbox) SyncNetwork(ctx context.Context) error { return s.net.Sync(ctx) }

func (s *sessionSandbox) GuestEnded() (string, bool) {
	return GuestState(s.cmd.Process.Pid, GuestExitWait)
}

// KillExec does nothing: the pid namespace ends every process of the
// sandbox with its guest.
func (s *sessionSandbox) KillExec(int) {}

func (s *sessionSandbox) Close() error {
	s.close.Do(func() {
		s.ctrl.Close()
		s.forkSock.Close()
		s.cmd.Process.Kill()
		s.cmd.Wait()
		s.net.Close()
		s.watch.Close()
		s.lim.Close()
	})
	return nil
}
