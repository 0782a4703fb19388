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
	// ErrCommitRefused: commit will not apply the trial as it is stored, and
	// changed nothing. Every refusal below matches it; a conflict (the host
	// moved on) is ErrCommitConflict instead.
	ErrCommitRefused = errors.New("commit refused")
	// ErrBlocked: the policy decided block; committing it needs the caller's
	// explicit override, which the store records with the trial.
	ErrBlocked = fmt.Errorf("%w: the trial was decided block", ErrCommitRefused)
	// ErrUnverified: the stored trial is not what this install signed (its
	// receipt does not verify with the install's key, or a content blob is
	// not what the signed delta says).
	ErrUnverified = fmt.Errorf("%w: the stored trial does not verify", ErrCommitRefused)
	// ErrUncommittable: the trial holds paths commit cannot write as the
	// trial left them; see *UncommittableError.
	ErrUncommittable = fmt.Errorf("%w: paths that cannot be committed", ErrCommitRefused)
	// ErrImageCommit: the trial ran on an image, whose paths are not the
	// host's; it commits only onto a host directory the caller names
	// (store.CommitOptions.To, `dryexec commit --to DIR`), and only what
	// it changed beneath its workspace (docs/images.md).
	ErrImageCommit = fmt.Errorf("%w: the trial ran on an image", ErrCommitRefused)
	// ErrTooManyLayers: an image has more layers than overlayfs can stack
	// (MaxImageLayers); see *TooManyLayersError.
	ErrTooManyLayers = errors.New("image has too many layers")
)

// Uncommittable is one path commit cannot write as the trial left it: a
// socket or device node, or a file whose content was not kept.
type Uncommittable struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// UncommittableError lists every path commit cannot write. Nothing was
// changed; the caller may commit the rest by asking to skip exactly these.
type UncommittableError struct {
	TrialID string
	Paths   []Uncommittable
}

func (e *UncommittableError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "commit refused: trial %s holds %d path(s) that cannot be committed; nothing was changed (skipping them commits the rest)", e.TrialID, len(e.Paths))
	for _, u := range e.Paths {
		fmt.Fprintf(&b, "\n  %s: %s", QuotePath(u.Path), u.Reason)
	}
	return b.String()
}

// Is makes errors.Is(err, ErrUncommittable) and errors.Is(err, ErrCommitRefused) true.
func (e *UncommittableError) Is(target error) bool {
	return target == ErrUncommittable || target == ErrCommitRefused
}

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
		fmt.Fprintf(&b, "\n  %s: %s", QuotePath(c.Path), c.Reason)
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
