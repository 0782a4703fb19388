package gvisor

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/rung/internal/viewtrial"
	"github.com/dryexec/dryexec/rung/linuxns"
	"github.com/dryexec/dryexec/wire"
)

var _ dryexec.SessionRung[wire.SessionStart] = (*Rung)(nil)

// OpenSandbox implements dryexec.SessionRung: the session's guest runs
// inside gVisor, over the same view as a trial's (the host's mounts as
// overlays dryexec owns, with its masks; runsc's own overlay off), in the
// sandbox's cgroup, with netsim behind a TUN device as on ns. The
// workspace is a tmpfs of gVisor's own with its baseline beside it, kept by
// the guest (scan staging; see docs/architecture.md, "The gvisor rung").
//
// A session on the host's view forks with memory (fork_linux.go): its
// sandbox is a memSessionSandbox.
func (r *Rung) OpenSandbox(ctx context.Context, spec dryexec.SandboxSpec) (dryexec.Sandbox[wire.SessionStart], error) {
	return r.openSession(ctx, spec, "")
}

// openSession opens a session sandbox for spec: a new guest, or, with
// restoreFrom (a checkpoint's dir, as the view guest's runsc names it),
// the sandbox that checkpoint saved, restored.
func (r *Rung) openSession(ctx context.Context, spec dryexec.SandboxSpec, restoreFrom string) (dryexec.Sandbox[wire.SessionStart], error) {
	var b *box
	var err error
	if spec.Image != nil {
		b, err = r.newImageBox(ctx, spec.ID, spec.Image, spec.Net, spec.NetCADir)
	} else {
		b, err = r.newBox(ctx, spec.ID, spec.Masks, spec.NoDefaultMasks, spec.OwnPaths, spec.Net, spec.NetCADir)
	}
	if err != nil {
		return nil, err
	}
	b.limits = spec.Limits
	ctrl, guestEnd, err := wire.SocketPair()
	if err != nil {
		b.net.Close()
		return nil, err
	}
	s := &sessionSandbox{box: b, ctrl: ctrl, ws: cmpOr(spec.Workspace, "/workspace")}
	inner, innerFDs := []*os.File{guestEnd}, []int{wire.CtrlFD}
	if spec.Image == nil {
		b.ctrlIn, b.restoreFrom = guestEnd, restoreFrom
		inner, innerFDs = nil, nil
	}
	err = b.start(inner)
	guestEnd.Close()
	b.ctrlIn = nil
	if err == nil {
		// Cancelling ctx while the sandbox is being made kills runsc.
		stop := context.AfterFunc(ctx, b.Kill)
		err = b.prepare(ctx, wire.RoleSession, innerFDs)
		if !stop() && err == nil {
			err = fmt.Errorf("opening a gvisor session: %w", context.Cause(ctx))
		}
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	if b.ctrlStdin {
		return &memSessionSandbox{s}, nil
	}
	return s, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// SandboxKey says what of the host a session sandbox opened now for spec
// would be built from: the view is ns's (the host's mount plan, the
// resolved masks), so the key is ns's, and a pooled sandbox made from
// another is stale.
func (r *Rung) SandboxKey(spec dryexec.SandboxSpec) (string, error) {
	return (&linuxns.Rung{}).SandboxKey(spec)
}

// sessionSandbox is a gvisor session's sandbox: runsc running the session
// guest over the view, its cgroup, masks and network.
type sessionSandbox struct {
	*box
	ctrl  *os.File
	ws    string
	close sync.Once
}

func (s *sessionSandbox) Conn() io.ReadWriteCloser { return s.ctrl }
func (s *sessionSandbox) Workspace() string        { return s.ws }

// GuestPID is runsc's: the session guest is a process of gVisor's, not of
// the host.
func (s *sessionSandbox) GuestPID() int { return s.Cmd.Process.Pid }

func (s *sessionSandbox) Configure(start *wire.SessionStart) {
	host, _ := os.Hostname()
	start.Rung, start.Workspace, start.Hostname = Name, s.ws, host
	// Each exec in a user namespace of its own (uid 0, mapped whole), as a
	// trial's command inside gVisor, and the pids limit as its
	// RLIMIT_NPROC: gVisor's processes are not the host's, which the
	// host's cgroup cannot count.
	start.CommandUserNS, start.CommandUID, start.CommandGID = true, 0, 0
	start.CommandNPROC = viewtrial.CommandNPROC(s.limits)
	// The view guest made the TUN device and bound netsim's resolv.conf
	// and trust bundle into the view: the session guest gets only the
	// trust variables, over the caller's own.
	start.Env = slices.DeleteFunc(start.Env, func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.ContainsFunc(s.trustEnv, func(tv string) bool { return strings.HasPrefix(tv, k+"=") })
	})
	start.Env = append(start.Env, s.trustEnv...)
}

// Ready puts the processes inside gVisor before runsc's own for the host
// OOM killer, now that the guest runs (oomOrder), in a new sandbox and in
// one restored from a checkpoint (Resume: its stubs are new host
// processes, at the kernel's default score); the masks were pinned when
// the view was built, before runsc started.
func (s *sessionSandbox) Ready() error { return s.oomOrder() }

func (s *sessionSandbox) Violations() []dryexec.Violation {
	var v []dryexec.Violation
	if s.group != nil {
		v = s.group.Hits()
	}
	return append(v, s.Watch.Check()...)
}

func (s *sessionSandbox) Warnings() []string {
	w := slices.Clone(s.warnings)
	if mw := s.Watch.Warning(); mw != "" {
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

// GuestEnded says how runsc ended: it ends when the session guest, the
// container's first process, does, with its status.
func (s *sessionSandbox) GuestEnded() (string, bool) { return s.Ended(linuxns.GuestExitWait) }

// KillExec does nothing: every process of the sandbox is gVisor's, and
// ends with it.
func (s *sessionSandbox) KillExec(int) {}

func (s *sessionSandbox) Close() error {
	s.close.Do(func() {
		s.ctrl.Close()
		s.box.cleanup()
		s.net.Close()
	})
	return nil
}
