"""HTTP to the daemon over its unix socket (or TCP with a bearer token), with
the standard library's http.client. Connections are kept open between
requests (HTTP keep-alive) in a small pool: a request takes an idle one or
opens a new one, so requests from several threads at once (a session's
host-call poller runs beside its execs) never share one. A fresh connection
and its first request cost the daemon a new goroutine and buffers; a kept one
saves that on every trial. A kept connection the daemon has closed meanwhile
(it closes idle ones only when it stops) fails before the daemon read
anything, and the request is sent once more on a new connection. Streams
(NDJSON) use a connection of their own, closed at the end."""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
import urllib.parse
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from ._errors import DaemonUnavailable, DryExecError, from_response

_NOBODY = object()

#: Idle connections a Transport keeps for reuse.
_MAX_IDLE = 4

#: What a kept connection the daemon closed raises on its next request,
#: before any answer: the request was not read, so it is sent again.
_STALE = (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected)


class _OneWrite(http.client.HTTPConnection):
    """An HTTPConnection that sends a request's head and body in one write.
    http.client sends them apart: the daemon, woken by the head, parses it,
    finds no body yet and sleeps until the second write wakes it again, one
    more hand-off between processes on every trial (on a busy machine, a
    wait for a CPU). expect_body is set before each request that has one."""

    expect_body = False
    _head: Optional[bytes] = None

    def send(self, data: Any) -> None:
        if self.expect_body and self._head is None and isinstance(data, bytes):
            self._head = data  # the head: the body follows
            return
        if self._head is not None:
            data, self._head, self.expect_body = self._head + bytes(data), None, False
        super().send(data)


class _TCPConnection(_OneWrite):
    pass


class _UnixConnection(_OneWrite):
    def __init__(self, path: str, timeout: Optional[float]) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if self.timeout is not None:
            s.settimeout(self.timeout)
        try:
            s.connect(self._path)
        except OSError:
            s.close()
            raise
        self.sock = s


class Transport:
    """Where the daemon is: a unix socket path, or an http:// URL and token."""

    def __init__(self, socket_path: Optional[str] = None, url: Optional[str] = None,
                 token: Optional[str] = None) -> None:
        if (socket_path is None) == (url is None):
            raise ValueError("give exactly one of socket_path and url")
        self.socket_path = socket_path
        self.url = url
        self.token = token
        if url is not None:
            u = urllib.parse.urlsplit(url)
            if u.scheme != "http" or not u.hostname:
                raise ValueError("url %r: want http://HOST:PORT" % url)
            self._host, self._port = u.hostname, u.port or 80
        self._idle: List[_OneWrite] = []
        self._idle_lock = threading.Lock()
        self._pid = os.getpid()

    def __repr__(self) -> str:
        return "Transport(%s)" % (("unix:" + self.socket_path) if self.socket_path else self.url)

    def _conn(self, timeout: Optional[float]) -> _OneWrite:
        if self.socket_path is not None:
            return _UnixConnection(self.socket_path, timeout)
        return _TCPConnection(self._host, self._port, timeout=timeout)

    def _take(self, timeout: Optional[float]) -> Optional[_OneWrite]:
        """An idle kept connection, if there is one (with timeout set)."""
        with self._idle_lock:
            if self._pid != os.getpid():
                # A forked child shares its parent's sockets: it keeps
                # none of them (closing them would close the parent's).
                self._idle, self._pid = [], os.getpid()
            conn = self._idle.pop() if self._idle else None
        if conn is not None:
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
        return conn

    def _keep(self, conn: _OneWrite, resp: http.client.HTTPResponse) -> None:
        """Keeps conn for the next request once resp is read to its end,
        unless either side said it closes."""
        if resp.will_close or conn.sock is None:
            conn.close()
            return
        with self._idle_lock:
            if self._pid == os.getpid() and len(self._idle) < _MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Closes the kept connections."""
        with self._idle_lock:
            idle, self._idle = self._idle, []
            mine = self._pid == os.getpid()
        if mine:
            for c in idle:
                c.close()

    def _send(self, method: str, path: str, body: Any, content_type: Optional[str], accept: Optional[str],
              timeout: Optional[float], extra: Optional[Mapping[str, str]] = None,
              reuse: bool = False) -> Tuple[_OneWrite, http.client.HTTPResponse]:
        headers: Dict[str, str] = dict(extra or {})
        data: Optional[bytes] = None
        if body is not _NOBODY:
            if isinstance(body, (bytes, bytearray)):
                data = bytes(body)
                headers["Content-Type"] = content_type or "application/octet-stream"
            else:
                data = json.dumps(body, separators=(",", ":")).encode("utf-8")
                headers["Content-Type"] = "application/json"
        if accept:
            headers["Accept"] = accept
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        kept = self._take(timeout) if reuse else None
        if kept is not None:
            try:
                kept._head, kept.expect_body = None, bool(data)
                kept.request(method, path, body=data, headers=headers)
                return kept, kept.getresponse()
            except _STALE:
                kept.close()  # closed by the daemon while idle: not read
            except (OSError, http.client.HTTPException) as e:
                kept.close()
                raise DaemonUnavailable("talking to the dryexec daemon at %s: %s" % (self, e)) from None
        conn = self._conn(timeout)
        conn.expect_body = bool(data)
        try:
            conn.request(method, path, body=data, headers=headers)
            return conn, conn.getresponse()
        except (ConnectionRefusedError, FileNotFoundError) as e:
            conn.close()
            raise DaemonUnavailable("no dryexec daemon answers at %s: %s" % (self, e)) from None
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise DaemonUnavailable("talking to the dryexec daemon at %s: %s" % (self, e)) from None

    def request(self, method: str, path: str, body: Any = _NOBODY, *, content_type: Optional[str] = None,
                timeout: Optional[float] = None, headers: Optional[Mapping[str, str]] = None) -> Tuple[int, Dict[str, str], bytes]:
        """Sends one request; returns status, headers (names lower-cased) and
        body. Errors (status >= 400) are raised as the exception for the
        daemon's error code."""
        conn, resp = self._send(method, path, body, content_type, None, timeout, headers, reuse=True)
        try:
            data = resp.read()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise DaemonUnavailable("reading the daemon's answer: %s" % e) from None
        self._keep(conn, resp)
        if resp.status >= 400:
            raise _error(resp.status, data)
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data

    def call(self, method: str, path: str, body: Any = _NOBODY, *, timeout: Optional[float] = None) -> Any:
        """A JSON request whose answer is JSON (None for 204)."""
        status, _, data = self.request(method, path, body, timeout=timeout)
        if status == 204 or not data:
            return None
        return json.loads(data)

    def stream(self, method: str, path: str, body: Any) -> Iterator[Dict[str, Any]]:
        """An NDJSON request: yields each event as it arrives."""
        conn, resp = self._send(method, path, body, None, "application/x-ndjson", None)
        try:
            if resp.status >= 400:
                raise _error(resp.status, resp.read())
            while True:
                line = resp.readline()
                if not line:
                    return
                if line.strip():
                    yield json.loads(line)
        finally:
            conn.close()


def _error(status: int, data: bytes) -> DryExecError:
    try:
        body = json.loads(data)
    except ValueError:
        body = {}
    return from_response(status, body)
