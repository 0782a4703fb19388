package dryexec

import (
	"errors"
	"fmt"
)

// Sentinel errors. Typed errors below match them with errors.Is.
var (
	// ErrIsolationUnavailable: the host cannot provide a rung. Nothing falls back.
	ErrIsolationUnavailable = errors.New("isolation unavailable")
	// ErrCommandNotFound: the action's argv[0] does not resolve in the sandbox view.
	ErrCommandNotFound = errors.New("command not found")
	// ErrBadAction: the action is malformed (empty argv, relative or missing cwd, …).
	ErrBadAction = errors.New("bad action")
	// ErrTrialNotFound: no stored trial has that id.
	ErrTrialNotFound = errors.New("trial not found")
	// ErrUpperFull: the trial wrote more than its upper tmpfs holds.
	ErrUpperFull = errors.New("trial upper storage full")
	// ErrGuest: the guest supervisor broke its protocol or died.
	ErrGuest = errors.New("guest supervisor failed")
)

// IsolationUnavailableError names the rung and the missing piece.
type IsolationUnavailableError struct {
	Rung    string
	Missing string
}

func (e *IsolationUnavailableError) Error() string {
	return fmt.Sprintf("rung %q unavailable: %s", e.Rung, e.Missing)
}

// Is makes errors.Is(err, ErrIsolationUnavailable) true.
func (e *IsolationUnavailableError) Is(target error) bool { return target == ErrIsolationUnavailable }
