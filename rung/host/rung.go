package host

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/guestexe"
	"github.com/dryexec/dryexec/wire"
)

// Name is the rung's contract name.
const Name = "host"

// NoIsolation is the warning every delta and session of this rung carries,
// and what doctor and the summary say of it.
const NoIsolation = "no isolation (host rung): the command ran as a plain process of this host; it could read, write and reach anything the caller can, and only what it wrote beneath its working directory's copy is in the delta"

// Notes are what `dryexec doctor` says of the host rung: that it is
// available says nothing about containment, since there is none.
func (r *Rung) Notes() []string {
	return []string{
		"no isolation: commands run as plain processes of this host; a trial runs on a scratch copy of its working directory and its delta holds only what changed there",
		"not enforced: masks, limits (but the timeout), network (--net is refused); never chosen by --rung best",
	}
}

// Rung runs commands with no isolation. The zero value is ready to use.
type Rung struct {
	// GuestExe is the binary started as `guest session`; empty means
	// guestexe.Executable().
	GuestExe string
}

var (
	_ dryexec.Rung                           = (*Rung)(nil)
	_ dryexec.SessionRung[wire.SessionStart] = (*Rung)(nil)
)

// Name implements dryexec.Rung.
func (r *Rung) Name() string { return Name }

// Available implements dryexec.Rung: a host can always run its own
// processes.
func (r *Rung) Available(ctx context.Context) error { return nil }

// OpenSandbox implements dryexec.SessionRung: the guest as a plain
// subprocess, its workspace and baseline in a scratch dir of the host
// (scan staging). Limits and masks are not enforced (Warnings says so); a
// network is refused, since nothing could intercept it.
func (r *Rung) OpenSandbox(ctx context.Context, spec dryexec.SandboxSpec) (dryexec.Sandbox[wire.SessionStart], error) {
	if len(spec.Net) > 0 {
		return nil, &dryexec.IsolationUnavailableError{Rung: Name, Missing: "network interception (the host rung shares the host's network; use the ns rung for net)"}
	}
	s, err := r.newScratch()
	if err != nil {
		return nil, err
	}
	if err := r.start(s); err != nil {
		return nil, err
	}
	return s, nil
}

// newScratch makes a sandbox's scratch dir: its workspace and baseline (and
// a fork's origin).
func (r *Rung) newScratch() (*sandbox, error) {
	tmp, err := os.MkdirTemp("", "dryexec-session-")
	if err != nil {
		return nil, err
	}
	s := &sandbox{r: r, tmp: tmp, ws: filepath.Join(tmp, "workspace"), base: filepath.Join(tmp, "baseline"), origin: filepath.Join(tmp, "origin")}
	for _, d := range []string{s.ws, s.base} {
		if err := os.Mkdir(d, 0o755); err != nil {
			os.RemoveAll(tmp)
			return nil, err
		}
	}
	return s, nil
}

// start starts s's guest; on failure its scratch dir is removed.
func (r *Rung) start(s *sandbox) error {
	tmp := s.tmp
	ctrl, guestEnd, err := wire.SocketPair()
	if err != nil {
		os.RemoveAll(tmp)
		return err
	}
	defer guestEnd.Close()
	exe := r.GuestExe
	if exe == "" {
		exe = guestexe.Executable()
	}
	s.ctrl = ctrl
	s.cmd = &exec.Cmd{
		Path: exe, Args: []string{"dryexec", "guest", wire.RoleSession}, Env: []string{},
		ExtraFiles: []*os.File{guestEnd}, SysProcAttr: guestAttr(),
	}
	if err := s.cmd.Start(); err != nil {
		ctrl.Close()
		os.RemoveAll(tmp)
		return err
	}
	return nil
}

// sandbox is a host session: the guest process and its scratch dir.
type sandbox struct {
	r                     *Rung
	ctrl                  *os.File
	cmd                   *exec.Cmd
	tmp, ws, base, origin string
	close                 sync.Once
	// forks are the branches' scratch dirs PrepareFork made, until opened.
	forks []*sandbox
}

func (s *sandbox) Conn() io.ReadWriteCloser { return s.ctrl }
func (s *sandbox) Workspace() string        { return s.ws }
func (s *sandbox) GuestPID() int            { return s.cmd.Process.Pid }

func (s *sandbox) Configure(start *wire.SessionStart) {
	start.Rung, start.Workspace, start.Baseline = Name, s.ws, s.base
}

func (s *sandbox) Ready() error                    { return nil }
func (s *sandbox) Violations() []dryexec.Violation { return nil }
func (s *sandbox) Network() []dryexec.NetworkEvent { return nil }

// Warnings: nothing is contained, ever.
func (s *sandbox) Warnings() []string { return []string{NoIsolation} }

func (s *sandbox) GuestEnded() (string, bool) { return guestEnded(s.cmd.Process.Pid) }

// KillExec kills what the exec with session id sid started: nothing else
// would once its guest is gone.
func (s *sandbox) KillExec(sid int) {
	if sid > 1 {
		killSession(sid)
	}
}

func (s *sandbox) Close() error {
	s.close.Do(func() {
		s.ctrl.Close()
		s.cmd.Process.Kill()
		s.cmd.Wait()
		s.DropFork()
		os.RemoveAll(s.tmp)
	})
	return nil
}
