package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"syscall"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/session"
	"github.com/dryexec/dryexec/store"
)

// requestError is a mistake in a request: 4xx, with a message meant for the
// caller.
type requestError struct {
	status int
	code   string
	msg    string
}

func (e *requestError) Error() string { return e.msg }

func badRequest(format string, a ...any) error {
	return &requestError{status: http.StatusBadRequest, code: "bad_request", msg: fmt.Sprintf(format, a...)}
}

// APIError is the body of every error response: {"error": {...}}.
type APIError struct {
	// Code is stable, for programs: bad_request, unauthorized, not_found,
	// no_route, method_not_allowed, too_large, unsupported_media_type,
	// isolation_unavailable, commit_conflict, already_done, unsafe_path,
	// session_lost, policy, not_representable, busy, timeout, corrupt,
	// no_space, image_unavailable, image_commit, internal.
	Code    string `json:"code"`
	Message string `json:"message"`
	// Conflicts lists the paths of a commit_conflict.
	Conflicts []dryexec.Conflict `json:"conflicts,omitempty"`
	// Rung and Missing explain isolation_unavailable.
	Rung    string `json:"rung,omitempty"`
	Missing string `json:"missing,omitempty"`
}

// classify maps an error to its HTTP status and body. Errors the caller did not
// cause (internal) keep their message too: the daemon serves its own user.
func classify(err error) (int, APIError) {
	var re *requestError
	var iu *dryexec.IsolationUnavailableError
	var cc *dryexec.CommitConflictError
	var mb *http.MaxBytesError
	e := APIError{Message: err.Error()}
	if status, ok := imageErrStatus(err, &e); ok {
		return status, e
	}
	switch {
	case errors.As(err, &re):
		e.Code = re.code
		return re.status, e
	case errors.As(err, &mb):
		e.Code = "too_large"
		e.Message = fmt.Sprintf("the request body is larger than %d bytes", mb.Limit)
		return http.StatusRequestEntityTooLarge, e
	case errors.As(err, &iu):
		e.Code, e.Rung, e.Missing = "isolation_unavailable", iu.Rung, iu.Missing
		return http.StatusServiceUnavailable, e
	case errors.As(err, &cc):
		e.Code, e.Conflicts = "commit_conflict", cc.Conflicts
		return http.StatusConflict, e
	case errors.Is(err, ErrBusy):
		e.Code = "busy"
		return http.StatusServiceUnavailable, e
	case errors.Is(err, dryexec.ErrBadAction):
		e.Code = "bad_request"
		return http.StatusBadRequest, e
	case errors.Is(err, dryexec.ErrTrialNotFound), errors.Is(err, ErrSessionNotFound):
		e.Code = "not_found"
		return http.StatusNotFound, e
	case errors.Is(err, dryexec.ErrAlreadyCommitted), errors.Is(err, dryexec.ErrDiscarded):
		e.Code = "already_done"
		return http.StatusConflict, e
	case errors.Is(err, dryexec.ErrUnsafePath):
		e.Code = "unsafe_path"
		return http.StatusConflict, e
	case errors.Is(err, dryexec.ErrBlocked):
		// The policy decided block: committing it needs the caller's
		// explicit override.
		e.Code = "blocked"
		return http.StatusForbidden, e
	case errors.Is(err, dryexec.ErrUncommittable):
		e.Code = "uncommittable"
		return http.StatusUnprocessableEntity, e
	case errors.Is(err, session.ErrForkUnsupported):
		e.Code = "fork_unsupported"
		return http.StatusNotImplemented, e
	case errors.Is(err, session.ErrParkUnsupported):
		e.Code = "park_unsupported"
		return http.StatusNotImplemented, e
	case errors.Is(err, ErrParkDamaged):
		e.Code = "park_damaged"
		return http.StatusConflict, e
	case errors.Is(err, session.ErrForkBusy):
		e.Code = "fork_busy"
		return http.StatusConflict, e
	case errors.Is(err, dryexec.ErrSessionLost):
		e.Code = "session_lost"
		return http.StatusGone, e
	case errors.Is(err, ErrPolicy):
		e.Code = "policy"
		return http.StatusForbidden, e
	case errors.Is(err, ErrNotRepresentable):
		e.Code = "not_representable"
		return http.StatusUnprocessableEntity, e
	case errors.Is(err, syscall.ENOSPC):
		// The daemon's disk (the store, the journal) is full: nothing was
		// recorded or changed; it works again once there is space.
		e.Code = "no_space"
		return http.StatusInsufficientStorage, e
	case errors.Is(err, store.ErrCorrupt):
		// The daemon's own data is damaged: not the caller's mistake, but
		// a code of its own so that a client can tell it from a crash and
		// discard the trial (which removes it).
		e.Code = "corrupt"
		return http.StatusInternalServerError, e
	case errors.Is(err, dryexec.ErrUnverified):
		// The stored delta is not what this install signed: refused, not
		// applied.
		e.Code = "unverified"
		return http.StatusConflict, e
	case errors.Is(err, context.DeadlineExceeded):
		e.Code = "timeout"
		return http.StatusGatewayTimeout, e
	}
	e.Code = "internal"
	return http.StatusInternalServerError, e
}
