package seatbelt

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/guestexe"
	"github.com/dryexec/dryexec/wire"
)

// Sessions: the guest supervisor runs unconfined, as the user (as on the
// host rung), and starts each command (a shell exec, a Python runner)
// under sandbox-exec with the commands' profile (SessionStart.CommandPrefix):
// they may write only the session's workspace and tmp, never the baseline
// the guest diffs the workspace against by scanning (scan staging, as on
// the host rung). A confined guest could not do that: a process under
// Seatbelt cannot apply a stricter profile to its children. The network is
// a trial's: netsim as the HTTP proxy on one loopback port, for the
// session's life, with the session's policy and mocks, and Seatbelt's
// denials read under the session's tag (sessionNet). Forks are clones of
// the parent's dirs (fork_darwin.go). Never run on a Mac; rung.Open hands
// the rung out when Available finds nothing missing on the Mac.

var _ dryexec.SessionRung[wire.SessionStart] = (*Rung)(nil)

// OpenSandbox implements dryexec.SessionRung.
func (r *Rung) OpenSandbox(ctx context.Context, spec dryexec.SandboxSpec) (dryexec.Sandbox[wire.SessionStart], error) {
	if err := checkSandbox(spec); err != nil {
		return nil, err
	}
	dirs, err := newSessionDirs(nil)
	if err != nil {
		return nil, err
	}
	return r.open(ctx, spec, dirs)
}

// open starts a session's guest over dirs, which it owns from then on
// (removes them when it fails, or when the sandbox closes).
func (r *Rung) open(ctx context.Context, spec dryexec.SandboxSpec, dirs *sessionDirs) (dryexec.Sandbox[wire.SessionStart], error) {
	s := &sandbox{r: r, dirs: dirs, ws: dirs.ws, base: dirs.base, cmdTmp: dirs.cmdTmp}
	fail := func(err error) (dryexec.Sandbox[wire.SessionStart], error) {
		if s.net != nil {
			s.net.close()
		}
		dirs.remove()
		return nil, err
	}
	pf := platform{homes: homes(), getenv: os.Getenv, denials: watchDenials}
	masked, hidden, err := cover(dryexec.TrialSpec{Masks: spec.Masks, NoDefaultMasks: spec.NoDefaultMasks, OwnPaths: spec.OwnPaths}, pf)
	if err != nil {
		return fail(err)
	}
	// The trust bundle beside, not inside, what the commands may write.
	if s.net, err = openSessionNet(ctx, spec, pf.getenv, filepath.Join(dirs.tmp, "netsim-ca.pem")); err != nil {
		return fail(err)
	}
	pr := dirs.profile(masked, hidden, s.net.nw.port, s.net.tag)
	if s.profile, err = pr.SBPL(); err != nil {
		return fail(err)
	}
	s.net.watchDenials(ctx, pr, dirs.marks, pf.denials)
	ctrl, guestEnd, err := wire.SocketPair()
	if err != nil {
		return fail(err)
	}
	defer guestEnd.Close()
	exe := r.GuestExe
	if exe == "" {
		exe = guestexe.Executable()
	}
	s.ctrl, s.conn = ctrl, &sentConn{ReadWriteCloser: ctrl, sent: &s.net.sent}
	// The guest itself is not confined: its commands are, each by the
	// prefix Configure hands it.
	s.cmd = &exec.Cmd{
		Path: exe, Args: []string{exe, "guest", wire.RoleSession},
		Env: []string{"TMPDIR=" + s.cmdTmp}, ExtraFiles: []*os.File{guestEnd},
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	if err := s.cmd.Start(); err != nil {
		ctrl.Close()
		return fail(err)
	}
	return s, nil
}

// sandbox is one seatbelt session: the guest and its scratch dir.
type sandbox struct {
	r                *Rung
	ctrl             *os.File
	conn             *sentConn // ctrl, its writes counted for the session's network
	cmd              *exec.Cmd
	dirs             *sessionDirs
	ws, base, cmdTmp string
	// profile is the commands' profile (SBPL), each command started under
	// it by the guest.
	profile string
	net     *sessionNet
	close   sync.Once
	// forks are the branches PrepareFork made and OpenFork has not opened.
	forks []*sessionDirs
}

func (s *sandbox) Conn() io.ReadWriteCloser { return s.conn }
func (s *sandbox) Workspace() string        { return s.ws }
func (s *sandbox) GuestPID() int            { return s.cmd.Process.Pid }

// Configure: the guest keeps the workspace and its baseline in the scratch
// dir and diffs them by scanning; it starts every command under
// sandbox-exec with the commands' profile; execs get the private tmp and
// netsim's proxy and trust variables over the caller's environment.
func (s *sandbox) Configure(start *wire.SessionStart) {
	start.Rung, start.Workspace, start.Baseline = Name, s.ws, s.base
	start.CommandPrefix = confine(s.profile, nil)
	start.Env = s.net.env(start.Env, s.cmdTmp)
}

func (s *sandbox) Ready() error                    { return nil }
func (s *sandbox) Violations() []dryexec.Violation { return s.net.Violations() }
func (s *sandbox) Network() []dryexec.NetworkEvent { return s.net.Network() }
func (s *sandbox) Warnings() []string {
	return append([]string{Unenforced}, s.net.Warnings()...)
}

// GuestEnded: how a guest ended is not looked at here.
func (s *sandbox) GuestEnded() (string, bool) { return "", false }

// KillExec kills the exec's process group (the guest announces each
// exec's, as on the host rung): a command that outlives its guest is
// still confined by the profile, but would go on running.
func (s *sandbox) KillExec(sid int) {
	if sid > 1 {
		syscall.Kill(-sid, syscall.SIGKILL)
	}
}

func (s *sandbox) Close() error {
	s.close.Do(func() {
		s.ctrl.Close()
		s.cmd.Process.Kill()
		s.cmd.Wait()
		s.net.close()
		s.DropFork()
		s.dirs.remove()
	})
	return nil
}
