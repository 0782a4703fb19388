"""Sessions: one sandbox kept alive over a workspace (tree in → execute → diff
out), in the shape of the product description's session() API."""

from __future__ import annotations

import asyncio
import base64
import functools
import io
import os
import tarfile
import threading
import urllib.parse
from typing import TYPE_CHECKING, Any, Dict, Iterable, Iterator, List, Mapping, MutableMapping, Optional, Tuple

from ._codec import decode, encode
from ._errors import DryExecError, NotFound, NotRepresentable, PolicyError, SessionLost, DaemonUnavailable
from ._types import Diff, Event, NetworkEvent, PythonResult, SessionInfo, ShellResult, _build

if TYPE_CHECKING:  # pragma: no cover
    from ._client import Client


def _check_allow(host_objects: Mapping[str, Any], allow: Mapping[str, Iterable[str]]) -> Dict[str, List[str]]:
    """The SDK's own allowlist check (the daemon checks again): every object
    needs an explicit list of method names; no wildcards, no private names."""
    out: Dict[str, List[str]] = {}
    for name in allow:
        if name not in host_objects:
            raise PolicyError("allow names %r, which is not a host object" % name)
    for name, obj in host_objects.items():
        if name not in allow:
            raise PolicyError("host object %r has no allow entry: list the methods the sandbox may call" % name)
        methods = allow[name]
        if isinstance(methods, str):
            raise PolicyError("allow[%r] must be a set of method names, not the string %r" % (name, methods))
        ms = []
        for m in methods:
            if not isinstance(m, str) or not m or "*" in m:
                raise PolicyError("allow[%r]: %r: list each method by name (no wildcards)" % (name, m))
            if m.startswith("_"):
                continue  # private: never callable
            if not callable(getattr(obj, m, None)):
                raise PolicyError("host object %r has no method %r" % (name, m))
            ms.append(m)
        out[name] = sorted(ms)
    return out


#: The header that carries a cache value's kind (absent: raw bytes).
_KIND_HEADER = "X-Dryexec-Cache-Kind"


class Pickled:
    """A cache value that is a pickle. The sandbox's Python pickles values
    that are neither bytes nor str (cache['n'] = 41) and unpickles them when
    it reads them; outside the sandbox they stay opaque bytes. Reading one
    from the host gives a Pickled and never unpickles it: a pickle the
    sandbox made runs whatever code it names when unpickled, so only
    ``loads()``, called on purpose, does that, in this process."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)

    def loads(self) -> Any:
        """Unpickles the value HERE. Only for pickles you trust: one written
        by the sandbox can run any code in this process."""
        import pickle
        return pickle.loads(self.data)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Pickled) and other.data == self.data

    def __hash__(self) -> int:
        return hash(self.data)

    def __repr__(self) -> str:
        return "Pickled(%d bytes)" % len(self.data)


def _cache_item(value: Any, where: str) -> Tuple[bytes, str]:
    """value as (bytes, kind) for the cache: bytes and str as today (str as
    UTF-8), a Pickled as is, anything else pickled here, in the caller's own
    process, for the sandbox to unpickle."""
    if isinstance(value, str):
        return value.encode("utf-8"), ""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value), ""
    if isinstance(value, Pickled):
        return value.data, "pickle"
    import pickle
    try:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), "pickle"
    except Exception as e:
        raise NotRepresentable("%s: cache values are bytes, str or values that pickle; %s does not: %s" % (where, type(value).__name__, e)) from None


def _check_caps(caps: Optional[Mapping[str, int]]) -> Optional[Dict[str, int]]:
    if caps is None:
        return None
    out: Dict[str, int] = {}
    for k, v in caps.items():
        if k not in ("entry", "total"):
            raise ValueError("caps: %r is not a cap (entry, total)" % k)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ValueError("caps[%r]: a non-negative int, not %r" % (k, v))
        out[k] = v
    return out


class SessionCache(MutableMapping[str, Any]):
    """The session's cache, as the sandbox's `cache` sees it: str keys; bytes
    values (a str is stored UTF-8 encoded and reads back as bytes); any other
    value is pickled here and unpickled by the sandbox. A value the sandbox
    pickled reads back here as a Pickled, never unpickled (see Pickled)."""

    def __init__(self, session: "Session") -> None:
        self._s = session

    def _path(self, key: str) -> str:
        if not isinstance(key, str) or not key:
            raise TypeError("cache keys are non-empty str")
        return self._s._path("/cache/" + urllib.parse.quote(key, safe=""))

    def __getitem__(self, key: str) -> Any:
        try:
            _, headers, data = self._s._t.request("GET", self._path(key))
        except NotFound:
            raise KeyError(key) from None
        if headers.get(_KIND_HEADER.lower()) == "pickle":
            return Pickled(data)
        return data

    def __setitem__(self, key: str, value: Any) -> None:
        data, kind = _cache_item(value, "cache[%r]" % key)
        self._s._t.request("PUT", self._path(key), data, content_type="application/octet-stream",
                           headers={_KIND_HEADER: kind} if kind else None)

    def __delitem__(self, key: str) -> None:
        if key not in self:
            raise KeyError(key)
        self._s._t.request("DELETE", self._path(key))

    def keys(self) -> List[str]:  # type: ignore[override]
        return list(self._s._t.call("GET", self._s._path("/cache"))["keys"])

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self.keys()


class Session:
    """A live sandbox over a workspace. Use as a context manager, or close().

    host_objects live in this process; the sandbox's Python calls them by name
    (host.db.query(...)) and the calls reach this process through the daemon.
    allow maps each object to the methods that may be called; both the daemon
    and this SDK refuse anything else (PermissionError in the sandbox).
    A host method runs in the session's poller thread: it must not call this
    session's methods (they wait for the exec that is calling it).
    Host objects are globals of their own name too (db.query(...) as well as
    host.db.query(...)) unless host_globals is False; their methods take
    keyword arguments. cache is the cache's initial content (values as
    SessionCache takes them). python_warm starts a Python runner at once, so
    that even the first python() is warm (otherwise a session that never runs
    Python keeps no interpreter).
    image opens the session on an OCI image's root filesystem instead of the
    host's (``"python:3.12"``, pulled on first use; docs/images.md): the
    workspace is mounted over it, and env goes on top of the image's Env.
    net is the session's network, as ``dryexec run --net`` (ns rung):
    ["none"] (the default), ["mock:/abs/mocks.yaml"], ["allow:api.example.com"],
    …; each result's ``network`` lists what its exec did, ``network`` the
    whole log.
    """

    def __init__(self, client: "Client", rung: str = "ns", workspace: Optional[str] = None, *,
                 host_objects: Optional[Mapping[str, Any]] = None, allow: Optional[Mapping[str, Iterable[str]]] = None,
                 env: Optional[Mapping[str, str]] = None, cache_read_only: bool = False, output_cap: int = 0,
                 net: Optional[Iterable[str]] = None, shell: Optional[str] = None,
                 cache: Optional[Mapping[str, Any]] = None, host_globals: bool = True, python_warm: bool = False,
                 image: Optional[str] = None) -> None:
        self._client = client
        self._t = client.transport
        self._objects = dict(host_objects or {})
        self._allow = _check_allow(self._objects, allow or {})
        req: Dict[str, Any] = {"rung": rung}
        if workspace:
            req["workspace"] = workspace
        if env is not None:
            req["env"] = dict(env)
        if cache_read_only:
            req["cache_read_only"] = True
        if output_cap:
            req["output_cap"] = output_cap
        if shell:
            req["shell"] = shell
        if self._objects:
            req["host_objects"] = self._allow
        if net is not None:
            if isinstance(net, str):
                net = [net]
            req["net"] = list(net)
        if cache:
            items: Dict[str, Any] = {}
            for k, v in cache.items():
                if not isinstance(k, str) or not k:
                    raise TypeError("cache keys are non-empty str")
                data, kind = _cache_item(v, "cache[%r]" % k)
                items[k] = {"bytes": base64.b64encode(data).decode("ascii"), "kind": kind} if kind else {"bytes": base64.b64encode(data).decode("ascii")}
            req["cache"] = items
        if not host_globals:
            req["no_host_globals"] = True
        if python_warm:
            req["python_warm"] = True
        if image:
            req["image"] = image
        self.info = _build(SessionInfo, self._t.call("POST", "/v1/sessions", req))
        self.id = self.info.session_id
        self._emits: List[Event] = []
        self._closed = threading.Event()
        self._poller: Optional[threading.Thread] = None
        if self._objects:
            self._poller = threading.Thread(target=self._serve_host_calls, name="dryexec-hostcalls-" + self.id, daemon=True)
            self._poller.start()

    def __repr__(self) -> str:
        return "<dry_exec.Session %s %s %s>" % (self.id, self.info.rung, "closed" if self._closed.is_set() else "open")

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _path(self, suffix: str = "") -> str:
        return "/v1/sessions/" + self.id + suffix

    def _call(self, method: str, suffix: str, body: Any = None) -> Any:
        if self._closed.is_set():
            raise SessionLost("session %s is closed" % self.id)
        try:
            if body is None:
                return self._t.call(method, self._path(suffix))
            return self._t.call(method, self._path(suffix), body)
        except NotFound as e:
            # The daemon no longer knows it (closed idle, or the daemon restarted).
            raise SessionLost("session %s is gone: %s" % (self.id, e.message), code="session_lost", status=e.status) from None

    @property
    def workspace(self) -> str:
        return self.info.workspace

    def ping(self) -> Dict[str, Any]:
        return self._call("POST", "/ping", {})

    def shell(self, command: str, timeout: Optional[float] = None, *, caps: Optional[Mapping[str, int]] = None) -> ShellResult:
        """Runs command in the session's shell; cwd and exported variables
        carry over. timeout in seconds (None: none). caps={"total": N} caps
        this exec's transcript and streams (their tails are kept, after a
        marker) over the session's output_cap."""
        body: Dict[str, Any] = {"command": command}
        if timeout:
            body["timeout_ms"] = int(timeout * 1000)
        c = _check_caps(caps)
        if c:
            body["caps"] = c
        return ShellResult.from_json(self._call("POST", "/shell", body))

    def python(self, code: str, inputs: Optional[Mapping[str, Any]] = None, timeout: Optional[float] = None, *,
               cache_readonly: bool = False, caps: Optional[Mapping[str, int]] = None) -> PythonResult:
        """Runs code in a fresh interpreter in the sandbox, in the shell's cwd
        and environment. inputs become globals (JSON values, bytes or
        pathlib paths). A failure of the code is a result with ok False.
        cache_readonly refuses this exec's cache writes (PermissionError in
        the sandbox); caps={"entry": N, "total": N} caps each print entry's
        text and all of them (and the transcript), with a marker where
        output was dropped."""
        body: Dict[str, Any] = {"code": code}
        if inputs:
            body["inputs"] = {k: encode(v, "inputs[%r]" % k) for k, v in inputs.items()}
        if timeout:
            body["timeout_ms"] = int(timeout * 1000)
        if cache_readonly:
            body["cache_readonly"] = True
        c = _check_caps(caps)
        if c:
            body["caps"] = c
        return PythonResult.from_json(self._call("POST", "/python", body))

    def diff(self, rebase: bool = False, *, origin: bool = False) -> Diff:
        """The workspace's changes since the baseline; rebase makes the
        current state the new baseline. A branch's baseline is its fork
        point; origin=True diffs it against its parent's baseline at the
        fork instead (BadRequest for a session that is no branch)."""
        body: Dict[str, Any] = {}
        if rebase:
            body["rebase"] = True
        if origin:
            body["origin"] = True
        return Diff.from_json(self._call("POST", "/diff", body))

    def fork(self, n: int = 1) -> List["Session"]:
        """n new sessions (branches) starting from this one's state now: the
        workspace exactly, the shell's cwd and exported environment, and the
        cache. Python interpreter state is not carried (every python() starts
        a fresh interpreter anyway). Each branch is a session of its own (own
        limits, network log; its diff() is against the fork point); this one
        keeps running. A branch's host-object calls are served by this
        session. On the ns rung the workspace is shared, not copied; the fork
        is refused (Refused, code fork_busy) while a process of the session
        holds a workspace file open for writing."""
        r = self._call("POST", "/fork", {"n": n})
        group = [Session._attach(self._client, info) for info in r.get("sessions") or []]
        for b in group:
            b._group = group
        return group

    def keep(self, branch: "Session") -> Dict[str, Any]:
        """Makes branch's changes since the fork this session's (written over
        its workspace; its cache too) and closes every branch of that fork.
        Returns {"session_id", "kept", "discarded"}."""
        r = self._call("POST", "/keep", {"branch": branch.id})
        for b in getattr(branch, "_group", None) or [branch]:
            b._closed.set()
        return r

    def park(self) -> Dict[str, Any]:
        """Saves the session to disk and stops it (vm rung only): nothing
        runs or is held until resume(), which brings back its workspace,
        baseline, shell cwd and exported environment, and cache as they were
        (not what it wrote outside the workspace). Other rungs refuse
        (Refused, code park_unsupported) and the session goes on. Returns
        {"session_id", "rung", "workspace", "created", "parked", "bytes"}.
        A parked session belongs to the daemon that parked it: the daemon's
        exit drops it."""
        r = self._call("POST", "/park", {})
        if self._poller is not None:
            # The poller ends once the daemon no longer knows the session
            # as live; resume() starts another.
            self._poller.join(timeout=30)
            self._poller = None
        return r

    def resume(self) -> "Session":
        """Starts this parked session again where it was parked; its host
        objects are served again by this object. Returns self."""
        if self._closed.is_set():
            raise SessionLost("session %s is closed" % self.id)
        self.info = _build(SessionInfo, self._t.call("POST", "/v1/parked/%s/resume" % urllib.parse.quote(self.id, safe=""), {}))
        if self._objects and self._poller is None:
            self._poller = threading.Thread(target=self._serve_host_calls, name="dryexec-hostcalls-" + self.id, daemon=True)
            self._poller.start()
        return self

    def compare(self, *others: "Session") -> Dict[str, Any]:
        """This session's diff and others' side by side (dry_exec.compare)."""
        from ._client import compare_ids
        return compare_ids(self._client, [self.id] + [o.id for o in others])

    @classmethod
    def _attach(cls, client: "Client", info: Mapping[str, Any]) -> "Session":
        """A Session object for a session the daemon already opened (a
        branch): no host objects of its own."""
        self = cls.__new__(cls)
        self._client = client
        self._t = client.transport
        self._objects = {}
        self._allow = {}
        self.info = _build(SessionInfo, info)
        self.id = self.info.session_id
        self._emits = []
        self._closed = threading.Event()
        self._poller = None
        return self

    def reset(self) -> None:
        """Puts the workspace back to the baseline."""
        self._call("POST", "/reset", {})

    def push_dir(self, path: str) -> int:
        """Replaces the workspace (and baseline) with a copy of the host
        directory path; returns the number of entries."""
        if not os.path.isdir(path):
            raise NotADirectoryError(path)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
            for name in sorted(os.listdir(path)):
                tf.add(os.path.join(path, name), arcname=name, recursive=True)
        return self.push_tar(buf.getvalue())

    def push_tar(self, data: bytes) -> int:
        """Replaces the workspace with the tree in a tar stream."""
        if self._closed.is_set():
            raise SessionLost("session %s is closed" % self.id)
        try:
            r = self._t.request("PUT", self._path("/tree"), data, content_type="application/x-tar")[2]
        except NotFound as e:
            raise SessionLost("session %s is gone: %s" % (self.id, e.message)) from None
        import json
        return int(json.loads(r).get("entries", 0))

    @property
    def cache(self) -> SessionCache:
        return SessionCache(self)

    @property
    def emits(self) -> List[Event]:
        """Every event the sandbox emitted so far, in order."""
        r = self._call("GET", "/events?after=%d" % len(self._emits))
        for e in r.get("events") or []:
            self._emits.append(Event(name=e.get("name", ""), value=decode(e.get("value") or {"type": "json"})))
        return list(self._emits)

    @property
    def network(self) -> List[NetworkEvent]:
        """The session's whole network log so far, in order (its first 10 000
        events)."""
        r = self._call("GET", "/network")
        return [_build(NetworkEvent, e) for e in r.get("network") or []]

    def close(self) -> None:
        """Closes the session; its sandbox and workspace are gone."""
        if self._closed.is_set():
            return
        self._closed.set()
        try:
            self._t.call("DELETE", self._path())
        except (NotFound, SessionLost, DaemonUnavailable):
            pass
        if self._poller is not None:
            self._poller.join(timeout=30)

    # ---- host objects

    def _serve_host_calls(self) -> None:
        while not self._closed.is_set():
            try:
                call = self._t.call("GET", self._path("/hostcalls?wait_ms=20000"), timeout=60)
            except (NotFound, SessionLost, DaemonUnavailable):
                return
            except DryExecError:
                if self._closed.wait(0.1):
                    return
                continue
            if not call:
                continue
            answer = self._answer(call)
            try:
                self._t.call("POST", self._path("/hostcalls/" + urllib.parse.quote(call["call_id"], safe="")), answer)
            except DryExecError:
                pass

    def _answer(self, call: Mapping[str, Any]) -> Dict[str, Any]:
        name, method = call.get("object", ""), call.get("method", "")
        # Checked here too: the daemon already refused anything not listed,
        # but this process holds the real object and trusts only its own list.
        if name not in self._objects or method.startswith("_") or method not in self._allow.get(name, ()):
            return {"error": {"code": "permission", "message": "host object %r: method %r is not allowed" % (name, method)}}
        kw = call.get("kwargs") or {}
        # The daemon refused private and non-identifier keywords already;
        # this process checks again before they reach the real object.
        for k in kw:
            if not isinstance(k, str) or not k.isidentifier() or k.startswith("_"):
                return {"error": {"code": "permission", "message": "%s.%s(): keyword %r is not allowed" % (name, method, k)}}
        try:
            args = [decode(a) for a in call.get("args") or []]
            kwargs = {k: decode(v) for k, v in kw.items()}
        except DryExecError as e:
            return {"error": {"code": "type", "message": str(e)}}
        try:
            result = getattr(self._objects[name], method)(*args, **kwargs)
        except PermissionError as e:
            return {"error": {"code": "permission", "message": str(e)}}
        except TypeError as e:
            return {"error": {"code": "type", "message": "%s.%s(): %s" % (name, method, e)}}
        except Exception as e:  # the object's own failure, raised in the sandbox as RuntimeError
            return {"error": {"code": "host_error", "message": "%s.%s(): %s: %s" % (name, method, type(e).__name__, e)}}
        try:
            return {"value": encode(result, "%s.%s() result" % (name, method))}
        except NotRepresentable as e:
            return {"error": {"code": "host_error", "message": str(e)}}


class AsyncSession:
    """A Session for asyncio code: the same methods, awaitable."""

    def __init__(self, session: Session) -> None:
        self.sync = session

    async def _run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, functools.partial(fn, *args, **kwargs))

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def shell(self, command: str, timeout: Optional[float] = None, **kwargs: Any) -> ShellResult:
        return await self._run(self.sync.shell, command, timeout, **kwargs)

    async def python(self, code: str, inputs: Optional[Mapping[str, Any]] = None, timeout: Optional[float] = None,
                     **kwargs: Any) -> PythonResult:
        return await self._run(self.sync.python, code, inputs, timeout, **kwargs)

    async def diff(self, rebase: bool = False, *, origin: bool = False) -> Diff:
        return await self._run(self.sync.diff, rebase, origin=origin)

    async def fork(self, n: int = 1) -> List["AsyncSession"]:
        return [AsyncSession(b) for b in await self._run(self.sync.fork, n)]

    async def keep(self, branch: "AsyncSession") -> Dict[str, Any]:
        return await self._run(self.sync.keep, branch.sync)

    async def park(self) -> Dict[str, Any]:
        return await self._run(self.sync.park)

    async def resume(self) -> "AsyncSession":
        await self._run(self.sync.resume)
        return self

    async def compare(self, *others: "AsyncSession") -> Dict[str, Any]:
        return await self._run(self.sync.compare, *[o.sync for o in others])

    async def reset(self) -> None:
        await self._run(self.sync.reset)

    async def push_dir(self, path: str) -> int:
        return await self._run(self.sync.push_dir, path)

    async def ping(self) -> Dict[str, Any]:
        return await self._run(self.sync.ping)

    async def emits(self) -> List[Event]:
        return await self._run(lambda: self.sync.emits)

    async def network(self) -> List[NetworkEvent]:
        return await self._run(lambda: self.sync.network)

    async def close(self) -> None:
        await self._run(self.sync.close)


def session(rung: str = "ns", workspace: Optional[str] = None, *, host_objects: Optional[Mapping[str, Any]] = None,
            allow: Optional[Mapping[str, Iterable[str]]] = None, env: Optional[Mapping[str, str]] = None,
            cache_read_only: bool = False, output_cap: int = 0, net: Optional[Iterable[str]] = None,
            shell: Optional[str] = None, client: Optional["Client"] = None, cache: Optional[Mapping[str, Any]] = None,
            host_globals: bool = True, python_warm: bool = False, image: Optional[str] = None) -> Session:
    """Opens a session on the default client: ``with dry_exec.session(...) as s``."""
    from ._client import default_client
    return (client or default_client()).session(rung, workspace, host_objects=host_objects, allow=allow, env=env,
                                                cache_read_only=cache_read_only, output_cap=output_cap, net=net,
                                                shell=shell, cache=cache, host_globals=host_globals,
                                                python_warm=python_warm, image=image)
