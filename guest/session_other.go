//go:build !linux

package guest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"syscall"

	"github.com/dryexec/dryexec/wire"
)

type sessionPlatform struct{}

func (s *session) start() error {
	s.shell.env = s.cfg.Env
	// The host rung and the seatbelt rung (macOS, the guest confined by
	// sandbox-exec from outside) both scan a workspace in a scratch dir.
	if s.cfg.Rung != "host" && s.cfg.Rung != "seatbelt" {
		return fmt.Errorf("rung %q needs Linux", s.cfg.Rung)
	}
	if s.cfg.Workspace == "" || s.cfg.Baseline == "" {
		return fmt.Errorf("the %s rung needs a workspace and a baseline directory", s.cfg.Rung)
	}
	s.ws = s.cfg.Workspace
	st, err := newScanStaging(s.cfg.Workspace, s.cfg.Baseline)
	if err != nil {
		return err
	}
	s.st = st
	s.shell.cwd = s.ws
	return nil
}

func (s *session) close() {}

func (s *session) startExec(cmd *exec.Cmd) error { return cmd.Start() }

func (s *session) takeViolations() []wire.Violation { return nil }

func (s *session) takeOOMKills() int64 { return 0 }

func (s *session) execAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }

func (s *session) reapOrphans() {}

func setNotDumpable() {}

// quiesce: only the ns rung stops the sandbox's processes for a fork.
func (s *session) quiesce() (resume func()) { return func() {} }

// errWriters is the ns rung's refusal to freeze (fork_linux.go); no other
// platform freezes.
var errWriters = errors.New("a workspace file is open for writing")

// vmPark: only the vm rung parks (vmpark_linux.go).
type vmPark struct{}

func (s *session) parkVM() error { return fmt.Errorf("rung %s cannot park", s.cfg.Rung) }

func (s *session) unparkVM(int64) error { return fmt.Errorf("rung %s cannot park", s.cfg.Rung) }

func (s *session) branchVM() error { return fmt.Errorf("rung %s cannot branch", s.cfg.Rung) }

// streamFork is the gvisor rung's (gvisorsession_linux.go).
func (s *session) streamFork(context.Context, *wire.Forked) error {
	return errors.New("streaming a fork's trees: gvisor sessions run on Linux only")
}
