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

// Sessions, as far as this build goes (no network: --net none only, every
// connection denied, none logged): the guest supervisor runs under
// sandbox-exec with a profile that lets it (and so every command it
// starts) write only beneath the sandbox's scratch dir, over a workspace
// the guest compares with its baseline by scanning (scan staging, as on
// the host rung). Never run on a Mac; no forks; the baseline is in the
// writable scratch dir, where a command could reach it (one profile covers
// the guest and its commands). rung.Open hands the rung out when
// Available finds nothing missing on the Mac.

var _ dryexec.SessionRung[wire.SessionStart] = (*Rung)(nil)

// OpenSandbox implements dryexec.SessionRung.
func (r *Rung) OpenSandbox(ctx context.Context, spec dryexec.SandboxSpec) (dryexec.Sandbox[wire.SessionStart], error) {
	if err := checkSpec(dryexec.TrialSpec{Net: spec.Net, Image: spec.Image, Action: dryexec.Action{Argv: []string{"guest"}, Cwd: "/"}}); err != nil {
		return nil, err
	}
	for _, n := range spec.Net {
		if n != "none" {
			// Trials run netsim as their proxy; a session's execs would
			// need its log split per exec, which is not built.
			return nil, &dryexec.IsolationUnavailableError{Rung: Name, Missing: "network for seatbelt sessions (trials have netsim as a proxy; sessions only --net none, every connection denied)"}
		}
	}
	pf := platform{homes: homes(), getenv: os.Getenv}
	masked, hidden, err := cover(dryexec.TrialSpec{Masks: spec.Masks, NoDefaultMasks: spec.NoDefaultMasks, OwnPaths: spec.OwnPaths}, pf)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "dryexec-seatbelt-session-")
	if err != nil {
		return nil, err
	}
	s := &sandbox{tmp: tmp}
	if s.tmp, err = filepath.EvalSymlinks(tmp); err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	s.ws, s.base = filepath.Join(s.tmp, "workspace"), filepath.Join(s.tmp, "baseline")
	for _, d := range []string{s.ws, s.base, filepath.Join(s.tmp, "tmp")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			os.RemoveAll(tmp)
			return nil, err
		}
	}
	profile, err := Profile{Writable: []string{s.tmp}, Masked: masked, Hidden: hidden}.SBPL()
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	ctrl, guestEnd, err := wire.SocketPair()
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	defer guestEnd.Close()
	exe := r.GuestExe
	if exe == "" {
		exe = guestexe.Executable()
	}
	s.ctrl = ctrl
	s.cmd = &exec.Cmd{
		Path: SandboxExec, Args: confine(profile, []string{exe, "guest", wire.RoleSession}),
		Env: []string{"TMPDIR=" + filepath.Join(s.tmp, "tmp")}, ExtraFiles: []*os.File{guestEnd},
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	if err := s.cmd.Start(); err != nil {
		ctrl.Close()
		os.RemoveAll(tmp)
		return nil, err
	}
	return s, nil
}

// sandbox is one seatbelt session: the confined guest and its scratch dir.
type sandbox struct {
	ctrl          *os.File
	cmd           *exec.Cmd
	tmp, ws, base string
	close         sync.Once
}

func (s *sandbox) Conn() io.ReadWriteCloser { return s.ctrl }
func (s *sandbox) Workspace() string        { return s.ws }
func (s *sandbox) GuestPID() int            { return s.cmd.Process.Pid }

// Configure: the guest keeps the workspace and its baseline in the scratch
// dir and diffs them by scanning.
func (s *sandbox) Configure(start *wire.SessionStart) {
	start.Rung, start.Workspace, start.Baseline = Name, s.ws, s.base
}

func (s *sandbox) Ready() error                    { return nil }
func (s *sandbox) Violations() []dryexec.Violation { return nil }
func (s *sandbox) Network() []dryexec.NetworkEvent { return nil }
func (s *sandbox) Warnings() []string              { return []string{Unenforced} }

// GuestEnded: how a guest ended is not looked at here.
func (s *sandbox) GuestEnded() (string, bool) { return "", false }

// KillExec kills the exec's process group: a command that outlives its
// guest is still confined by the profile, but would go on running.
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
		os.RemoveAll(s.tmp)
	})
	return nil
}
