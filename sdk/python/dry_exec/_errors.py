"""Exception classes. Every error from the daemon carries its stable code."""

from typing import Any, Dict, List, Optional


class DryExecError(Exception):
    """Base of every dry_exec error. ``code`` is the daemon's stable error code
    (see docs/api.md), ``status`` the HTTP status (0 if none)."""

    code = "error"

    def __init__(self, message: str, *, code: Optional[str] = None, status: int = 0,
                 detail: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.status = status
        self.detail = detail or {}


class IsolationUnavailable(DryExecError):
    """The host cannot provide the rung asked for; nothing falls back.
    ``rung`` and ``missing`` name it and what it lacks."""

    code = "isolation_unavailable"

    @property
    def rung(self) -> str:
        return str(self.detail.get("rung", ""))

    @property
    def missing(self) -> str:
        return str(self.detail.get("missing", ""))


class SessionLost(DryExecError):
    """The session's sandbox is gone (killed, crashed, closed, or the daemon
    stopped): open a new session."""

    code = "session_lost"


class PolicyError(DryExecError):
    """A policy or an allowlist refused the request: an invalid policy
    (Environment), a host object without an explicit method list, a wildcard,
    or a call the SDK's allowlist refuses."""

    code = "policy"


class CommitConflict(DryExecError):
    """The host changed since the trial; nothing was changed. ``conflicts`` is
    a list of {"path", "reason"}."""

    code = "commit_conflict"

    @property
    def conflicts(self) -> List[Dict[str, str]]:
        return list(self.detail.get("conflicts") or [])


class Blocked(DryExecError, PermissionError):
    """The policy decided block: the trial is not committed unless a person
    overrides it (``commit(force=True)``, recorded with the trial)."""

    code = "blocked"


class Uncommittable(DryExecError):
    """The trial holds paths commit cannot write (sockets, device nodes,
    contents that were not kept); nothing was changed."""

    code = "uncommittable"


class Unverified(DryExecError):
    """The stored trial is not what this install signed: it is not committed."""

    code = "unverified"


class NotRepresentable(DryExecError, TypeError):
    """A value cannot cross the sandbox boundary: only JSON values, bytes and
    pathlib paths do (nothing is pickled, except cache values, which only the
    sandbox unpickles)."""

    code = "not_representable"


class BadRequest(DryExecError, ValueError):
    """The daemon refused a malformed request (bad path, unknown field, …)."""

    code = "bad_request"


class NotFound(DryExecError, LookupError):
    """No such trial, session or cache key."""

    code = "not_found"


class AlreadyDone(DryExecError):
    """The trial was already committed or discarded."""

    code = "already_done"


class Busy(DryExecError):
    """Every trial slot is taken and the queue is full; retry later."""

    code = "busy"


class Unauthorized(DryExecError):
    """The daemon wants a bearer token (TCP) and none, or a wrong one, was given."""

    code = "unauthorized"


class Corrupt(DryExecError):
    """A stored trial is damaged (a torn delta, a tampered content blob): it
    cannot be shown or committed, only discarded."""

    code = "corrupt"


class NoSpace(DryExecError, OSError):
    """The daemon's state directory is full: nothing was half-recorded or
    half-applied; retry once there is space."""

    code = "no_space"


class ImageUnavailable(DryExecError):
    """The image (``run(image=...)``, ``session(image=...)``) cannot be had:
    no such image, its registry refused, not built for this platform, or its
    content is bad or has more layers than a sandbox stacks."""

    code = "image_unavailable"


class ImageCommit(DryExecError):
    """The trial ran on an image, whose paths are not the host's: it commits
    only with ``to=``, a host directory that receives what it changed beneath
    its workspace (docs/images.md). Nothing was changed."""

    code = "image_commit"


class DaemonUnavailable(DryExecError):
    """No daemon answers and none could be started (set DRYEXEC_BIN, or put
    dryexec on PATH)."""

    code = "daemon_unavailable"


_BY_CODE = {c.code: c for c in (IsolationUnavailable, SessionLost, PolicyError, CommitConflict, NotRepresentable,
                                 BadRequest, NotFound, AlreadyDone, Busy, Unauthorized, Corrupt, NoSpace,
                                 Blocked, Uncommittable, Unverified, ImageUnavailable, ImageCommit)}
# Refusals that have no class of their own are still bad requests.
for _c in ("no_route", "method_not_allowed", "too_large", "unsupported_media_type", "unsafe_path"):
    _BY_CODE.setdefault(_c, BadRequest if _c != "unsafe_path" else DryExecError)


def from_response(status: int, body: Dict[str, Any]) -> DryExecError:
    """The exception for an error response body {"error": {...}}."""
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        return DryExecError("HTTP %d from the daemon" % status, status=status)
    code = str(err.get("code", "error"))
    cls = _BY_CODE.get(code, DryExecError)
    return cls(str(err.get("message", code)), code=code, status=status, detail=err)
