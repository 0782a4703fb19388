"""HTTP to the daemon over its unix socket (or TCP with a bearer token), with
the standard library's http.client. One connection per request: requests may
come from several threads at once (a session's host-call poller runs beside
its execs), and a unix-socket connect costs microseconds."""

from __future__ import annotations

import http.client
import json
import socket
import urllib.parse
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple

from ._errors import DaemonUnavailable, DryExecError, from_response

_NOBODY = object()


class _UnixConnection(http.client.HTTPConnection):
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

    def __repr__(self) -> str:
        return "Transport(%s)" % (("unix:" + self.socket_path) if self.socket_path else self.url)

    def _conn(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        if self.socket_path is not None:
            return _UnixConnection(self.socket_path, timeout)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _send(self, method: str, path: str, body: Any, content_type: Optional[str], accept: Optional[str],
              timeout: Optional[float], extra: Optional[Mapping[str, str]] = None) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
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
        conn = self._conn(timeout)
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
        conn, resp = self._send(method, path, body, content_type, None, timeout, headers)
        try:
            data = resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise DaemonUnavailable("reading the daemon's answer: %s" % e) from None
        finally:
            conn.close()
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
