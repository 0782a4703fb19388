package dryexec

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Typed errors below match them with errors.Is.
var (
	// ErrIsolationUnavailable: the host cannot provide a rung. Nothing falls back.
	ErrIsolationUnavailable = errors.New("isolation unavailable")
	// ErrBadAction: the action is malformed (empty argv, relative or missing cwd, …).
	ErrBadAction = errors.New("bad action")
	// ErrTrialNotFound: no stored trial has that id.
	ErrTrialNotFound = errors.New("trial not found")
	// ErrAlreadyCommitted: the trial was committed before; a trial commits once.
	ErrAlreadyCommitted = errors.New("trial already committed")
	// ErrDiscarded: the trial was discarded.
	ErrDiscarded = errors.New("trial was discarded")
	// ErrCommitConflict: the host changed since the trial; see *CommitConflictError.
	ErrCommitConflict = errors.New("commit conflict")
	// ErrSessionLost: the session's guest is gone (killed, crashed); open a new one.
	ErrSessionLost = errors.New("session lost")
	// ErrUnsafePath: a host path leads through a symlink (or out of its tree);
	// commit refuses to write through it.
	ErrUnsafePath = errors.New("unsafe host path")
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

// Conflict is one path whose host state is not what the trial started from.
type Conflict struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// CommitConflictError lists every conflicting path. Commit changed nothing.
type CommitConflictError struct {
	TrialID   string
	Conflicts []Conflict
}

func (e *CommitConflictError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "commit conflict: the host changed since trial %s; nothing was changed", e.TrialID)
	for _, c := range e.Conflicts {
		fmt.Fprintf(&b, "\n  %s: %s", c.Path, c.Reason)
	}
	return b.String()
}

// Is makes errors.Is(err, ErrCommitConflict) true.
func (e *CommitConflictError) Is(target error) bool { return target == ErrCommitConflict }

// ErrContentNotKept: a file's new content was not stored with its trial (a
// per-trial cap, the store's quota, a full disk, the trial's deadline). The
// file is still listed in the delta, marked with FileChange.NotKept; see
// *ContentNotKeptError.
var ErrContentNotKept = errors.New("content not kept")

// ContentNotKeptError says why one file's content was not stored. A BlobSink
// returns it from PutBlob when it refuses to keep a blob but has still read
// all of it: its sha256 and length are then those of the whole content.
type ContentNotKeptError struct {
	Reason string
}

func (e *ContentNotKeptError) Error() string { return "content not kept: " + e.Reason }

// Is makes errors.Is(err, ErrContentNotKept) true.
func (e *ContentNotKeptError) Is(target error) bool { return target == ErrContentNotKept }
