"""Clients: Client (sync) and DryExecClient (async), and the module-level
default client behind dry_exec.run, @dry_run and dry_exec.session."""

from __future__ import annotations

import asyncio
import atexit
import functools
import os
import sys
import threading
import urllib.parse
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Union

from ._daemon import Daemon
from ._errors import BadRequest
from ._types import Action, Environment, FileChange, StateDelta, _build

Command = Union[str, Sequence[str]]
#: A callback for streamed output: (stream name "stdout"|"stderr", text).
OutputCallback = Callable[[str, str], None]


class Client:
    """A synchronous client of the dryexec daemon. It finds a running daemon
    (DRYEXEC_URL, DRYEXEC_SOCKET, the default socket) or starts a private one
    (DRYEXEC_BIN, else dryexec on PATH), stopped by close() or at exit."""

    def __init__(self, socket_path: Optional[str] = None, url: Optional[str] = None, token: Optional[str] = None,
                 start: bool = True) -> None:
        self._daemon = Daemon.connect(socket_path=socket_path, url=url, token=token, start=start)
        self.transport = self._daemon.transport
        if self._daemon.started:
            atexit.register(self._daemon.stop)

    @property
    def started_daemon(self) -> bool:
        """Whether this client started the daemon it talks to."""
        return self._daemon.started

    def close(self) -> None:
        """Closes the kept connections; stops the daemon if this client
        started it."""
        self.transport.close()
        self._daemon.stop()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def health(self) -> Dict[str, Any]:
        return self.transport.call("GET", "/v1/health")

    def version(self) -> Dict[str, Any]:
        return self.transport.call("GET", "/v1/version")

    # ---- trials

    def run(self, command: Command, *, cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
            timeout: Optional[float] = None, rung: Optional[str] = None, stdin: Optional[str] = None,
            environment: Optional[Environment] = None, on_output: Optional[OutputCallback] = None,
            store: bool = True, net: Optional[Union[str, Sequence[str]]] = None,
            image: Optional[str] = None) -> StateDelta:
        """Runs command in a trial and returns its StateDelta. A str is run
        with /bin/sh -c; a list is an argv. cwd defaults to the current
        directory; timeout is in seconds. on_output, if given, receives the
        output while it runs (the delta still holds all of it). net is as
        `dryexec run --net` (default: none). image runs it on an OCI image's
        root filesystem instead of the host's (``"python:3.12"``, pulled on
        first use): cwd is then an absolute directory in the image (default
        its WorkingDir), env goes on top of the image's Env, and the trial
        commits only with ``to=`` (docs/images.md)."""
        argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
        req: Dict[str, Any] = {"argv": argv, "cwd": os.path.abspath(cwd or os.getcwd())}
        if image:
            req["image"] = image
            if cwd:
                req["cwd"] = cwd
            else:
                del req["cwd"]
        if env:
            req["env"] = dict(env)
        if environment is not None:
            req["policy"] = environment.policy()
            if environment.env:
                req["env"] = dict(environment.env, **req.get("env", {}))
            if environment.rung and not rung:
                rung = environment.rung
            if environment.timeout_ms and timeout is None:
                timeout = environment.timeout_ms / 1000
            if environment.net is not None and net is None:
                net = environment.net
        if net is not None:
            # One spec given as a str is one spec, not its characters.
            req["net"] = [net] if isinstance(net, str) else list(net)
        if timeout:
            req["timeout_ms"] = int(timeout * 1000)
        if rung:
            req["rung"] = rung
        if stdin is not None:
            req["stdin"] = stdin
        if not store:
            req["no_store"] = True
        if on_output is None:
            return StateDelta.from_json(self.transport.call("POST", "/v1/trials", req), self)
        for ev in self.transport.stream("POST", "/v1/trials", req):
            kind = ev.get("event")
            if kind in ("stdout", "stderr"):
                on_output(kind, ev.get("data", ""))
            elif kind == "delta":
                return StateDelta.from_json(ev["delta"], self)
            elif kind == "error":
                from ._errors import from_response
                raise from_response(int(ev.get("status", 500)), {"error": ev.get("error")})
        raise BadRequest("the trial's stream ended without a delta")

    def execute(self, action: Action, environment: Optional[Environment] = None) -> StateDelta:
        """Runs a description-style Action under environment's policy."""
        p = dict(action.payload or {})
        if action.target_resource in ("shell_command", "shell", "command"):
            cmd = p.get("command")
            if not cmd or not isinstance(cmd, (str, list, tuple)):
                raise BadRequest("action %s: payload['command'] must be an argv list or a shell string" % action.action_id)
        elif action.target_resource == "python":
            code = p.get("code")
            if not isinstance(code, str):
                raise BadRequest("action %s: payload['code'] must be Python source" % action.action_id)
            cmd = [sys.executable or "python3", "-c", code]
        else:
            raise BadRequest("action %s: target_resource %r: want shell_command or python"
                             % (action.action_id, action.target_resource))
        if action.mutation_type not in ("execute", "write", "delete", "update", "create"):
            raise BadRequest("action %s: mutation_type %r is not known" % (action.action_id, action.mutation_type))
        timeout = p.get("timeout_ms")
        return self.run(cmd, cwd=p.get("cwd"), env=p.get("env"), stdin=p.get("stdin"),
                        timeout=(timeout / 1000) if timeout else None, environment=environment)

    def trial(self, trial_id: str) -> StateDelta:
        """A stored trial."""
        return StateDelta.from_json(self.transport.call("GET", "/v1/trials/" + _seg(trial_id)), self)

    def trials(self) -> List[Dict[str, Any]]:
        """Stored trials, newest first (summaries)."""
        return self.transport.call("GET", "/v1/trials")["trials"]

    def commit(self, trial_id: str, paths: Optional[Iterable[str]] = None, force: bool = False,
               to: Optional[str] = None) -> List[FileChange]:
        """Applies a trial's changes to the host (all, or paths: absolute, or
        relative to the current directory). A trial the policy blocked raises
        Blocked unless force: a person decided (the override is recorded with
        the trial); force also commits where the host changed since the trial.
        A trial that ran on an image needs to: the host directory that
        receives what it changed beneath its workspace (ImageCommit without)."""
        body: Dict[str, Any] = {}
        if to is not None:
            body["to"] = os.path.abspath(to)
        if paths is not None:
            body["paths"] = [os.path.abspath(p) for p in paths]
        if force:
            body["force"] = True
        r = self.transport.call("POST", "/v1/trials/%s/commit" % _seg(trial_id), body)
        return [_build(FileChange, f) for f in r.get("applied") or []]

    def discard(self, trial_id: str) -> None:
        self.transport.call("POST", "/v1/trials/%s/discard" % _seg(trial_id), {})

    # ---- sessions

    def session(self, rung: str = "ns", workspace: Optional[str] = None, *,
                host_objects: Optional[Mapping[str, Any]] = None,
                allow: Optional[Mapping[str, Iterable[str]]] = None, env: Optional[Mapping[str, str]] = None,
                cache_read_only: bool = False, output_cap: int = 0, net: Optional[Iterable[str]] = None,
                shell: Optional[str] = None, cache: Optional[Mapping[str, Any]] = None, host_globals: bool = True,
                python_warm: bool = False, image: Optional[str] = None) -> "Session":
        """Opens a session (see dry_exec.Session)."""
        from ._session import Session
        return Session(self, rung=rung, workspace=workspace, host_objects=host_objects, allow=allow, env=env,
                       cache_read_only=cache_read_only, output_cap=output_cap, net=net, shell=shell, cache=cache,
                       host_globals=host_globals, python_warm=python_warm, image=image)

    def parked(self) -> List[Dict[str, Any]]:
        """The parked sessions (Session.park) this daemon can resume, its own
        and those an earlier daemon on the same store left, oldest park
        first: {"session_id", "rung", "workspace", "created", "parked",
        "expires", "bytes"} each."""
        return list(self.transport.call("GET", "/v1/parked").get("parked") or [])

    def resume(self, session_id: str) -> "Session":
        """Resumes a parked session by id (one parked by another process,
        say); the returned Session serves no host objects of its own."""
        from ._session import Session
        info = self.transport.call("POST", "/v1/parked/%s/resume" % _seg(session_id), {})
        return Session._attach(self, info)

    def drop_parked(self, session_id: str) -> None:
        """Removes a parked session and its saved state without resuming it."""
        self.transport.call("DELETE", "/v1/parked/%s" % _seg(session_id))


def compare_ids(client: "Client", ids: List[str]) -> Dict[str, Any]:
    """POST /v1/compare: the comparison as data (see dry_exec.compare)."""
    return client.transport.call("POST", "/v1/compare", {"ids": list(ids)})


def compare(*items: Any, client: Optional[Client] = None) -> Dict[str, Any]:
    """Compares stored trials and sessions side by side: items are trial ids
    (tr_...), session ids (se_...), StateDeltas or Sessions, two or more.
    Returns {"sides": [{name, decision, reasons, changed}], "paths": [{path,
    changes (one per side, None where it left the path alone), agreement
    ("alike", "differ" or "partial")}], "alike", "differ", "partial"}, as
    `dryexec compare --json` prints it."""
    ids = []
    for it in items:
        if isinstance(it, str):
            ids.append(it)
        elif hasattr(it, "trial_id"):
            ids.append(it.trial_id)
        elif hasattr(it, "sync"):
            ids.append(it.sync.id)
        else:
            ids.append(it.id)
    return compare_ids(client or default_client(), ids)


def _seg(s: str) -> str:
    return urllib.parse.quote(s, safe="")


class DryExecClient:
    """The asynchronous client (the product description's DryExecClient). Each call runs the
    synchronous client in a worker thread, so the event loop never blocks."""

    def __init__(self, client: Optional[Client] = None, **kwargs: Any) -> None:
        self._client = client
        self._kwargs = kwargs
        self._lock = threading.Lock()

    @property
    def sync(self) -> Client:
        """The synchronous client underneath (created on first use)."""
        with self._lock:
            if self._client is None:
                self._client = Client(**self._kwargs) if self._kwargs else default_client()
            return self._client

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, functools.partial(fn, *args, **kwargs))

    async def execute_ephemeral_action(self, env: Environment, action: Action) -> StateDelta:
        """Runs action in an ephemeral trial under env; returns the StateDelta."""
        return await self._call(lambda: self.sync.execute(action, env))

    async def run(self, command: Command, **kwargs: Any) -> StateDelta:
        return await self._call(lambda: self.sync.run(command, **kwargs))

    async def trial(self, trial_id: str) -> StateDelta:
        return await self._call(lambda: self.sync.trial(trial_id))

    async def commit(self, trial_id: str, paths: Optional[Iterable[str]] = None, force: bool = False,
                     to: Optional[str] = None) -> List[FileChange]:
        return await self._call(lambda: self.sync.commit(trial_id, paths, force, to))

    async def discard(self, trial_id: str) -> None:
        await self._call(lambda: self.sync.discard(trial_id))

    async def parked(self) -> List[Dict[str, Any]]:
        return await self._call(self.sync.parked)

    async def resume(self, session_id: str) -> "AsyncSession":
        from ._session import AsyncSession
        return AsyncSession(await self._call(lambda: self.sync.resume(session_id)))

    async def session(self, rung: str = "ns", workspace: Optional[str] = None, **kwargs: Any) -> "AsyncSession":
        from ._session import AsyncSession
        s = await self._call(lambda: self.sync.session(rung, workspace, **kwargs))
        return AsyncSession(s)


_default: Optional[Client] = None
_default_lock = threading.Lock()


def default_client() -> Client:
    """The process-wide client behind dry_exec.run, @dry_run and
    dry_exec.session (created on first use)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Client()
        return _default


def run(command: Command, **kwargs: Any) -> StateDelta:
    """Runs command in a trial (a str with /bin/sh -c) and returns the delta."""
    return default_client().run(command, **kwargs)


# @dry_run lives in _dryrun.py; dry_exec.dry_run is that one.
from ._dryrun import dry_run  # noqa: E402,F401
