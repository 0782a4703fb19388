"""The transport's kept connections (HTTP keep-alive), against real HTTP
servers on unix sockets: the daemon, and a plain one that closes each
connection after its answer without saying so (as a daemon that stops does
with the idle ones)."""

import os
import socket
import tempfile
import threading
import unittest

from . import _env

_env.setup()

import dry_exec  # noqa: E402
from dry_exec._transport import Transport  # noqa: E402


def _listening() -> "tuple[str, socket.socket]":
    """A unix socket listening in a fresh directory, and its path."""
    path = os.path.join(tempfile.mkdtemp(dir=_env._ROOT), "s.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(4)
    return path, srv


class KeptConnections(unittest.TestCase):
    def test_trials_reuse_one_connection(self) -> None:
        c = dry_exec.Client()
        try:
            d1 = c.run(["/bin/true"], store=False)
            self.assertEqual(len(c.transport._idle), 1)
            kept = c.transport._idle[0]
            d2 = c.run(["/bin/true"], store=False)
            self.assertEqual((d1.exit_code, d2.exit_code), (0, 0))
            self.assertEqual(c.transport._idle, [kept], "the second trial did not reuse the kept connection")
        finally:
            c.close()
        self.assertEqual(c.transport._idle, [])

    def test_closed_while_idle_is_sent_again(self) -> None:
        path, srv = _listening()
        conns = []

        def serve() -> None:
            # Answers one request per connection, keep-alive by HTTP/1.1's
            # default, then closes it: the next request on it finds it gone.
            while True:
                try:
                    s, _ = srv.accept()
                except OSError:
                    return
                conns.append(s)
                buf = b""
                while b"\r\n\r\n" not in buf:
                    buf += s.recv(4096)
                body = b'{"ok":true}'
                s.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                s.close()

        threading.Thread(target=serve, daemon=True).start()
        t = Transport(socket_path=path)
        try:
            for _ in range(3):
                self.assertEqual(t.call("GET", "/v1/health"), {"ok": True})
        finally:
            t.close()
            srv.close()
        self.assertEqual(len(conns), 3)


class OneWrite(unittest.TestCase):
    def test_head_and_body_in_one_write(self) -> None:
        # http.client writes a request's head and body apart: the daemon,
        # woken by the head, would sleep again until the body came. Every
        # request must reach the socket as one write, on a new connection
        # and on a kept one, with a body and without.
        path, srv = _listening()
        got = []

        def serve() -> None:
            s, _ = srv.accept()
            buf = b""
            while True:
                while b"\r\n\r\n" not in buf:
                    more = s.recv(4096)
                    if not more:
                        return
                    buf += more
                head, _, buf = buf.partition(b"\r\n\r\n")
                n = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        n = int(line.split(b":")[1])
                while len(buf) < n:
                    buf += s.recv(4096)
                got.append((head.split(b" ")[1], buf[:n]))
                buf = buf[n:]
                body = b'{"ok":true}'
                s.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

        threading.Thread(target=serve, daemon=True).start()
        writes = []

        class Recorder:
            def __init__(self, s: socket.socket) -> None:
                self._s = s

            def sendall(self, b: bytes) -> None:
                writes.append(bytes(b))
                self._s.sendall(b)

            def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
                return getattr(self._s, name)

        t = Transport(socket_path=path)
        new_conn = t._conn

        def recorded(timeout):  # type: ignore[no-untyped-def]
            c = new_conn(timeout)
            connect = c.connect

            def connect_recorded() -> None:
                connect()
                c.sock = Recorder(c.sock)  # type: ignore[assignment]
            c.connect = connect_recorded  # type: ignore[method-assign]
            return c
        t._conn = recorded  # type: ignore[method-assign]
        try:
            self.assertEqual(t.call("POST", "/a", {"argv": ["/bin/true"]}), {"ok": True})
            self.assertEqual(t.call("GET", "/b"), {"ok": True})
            self.assertEqual(t.call("POST", "/c", {"argv": ["/bin/sh", "-c", "true"]}), {"ok": True})
        finally:
            t.close()
            srv.close()
        self.assertEqual(got, [(b"/a", b'{"argv":["/bin/true"]}'), (b"/b", b""),
                               (b"/c", b'{"argv":["/bin/sh","-c","true"]}')])
        self.assertEqual(len(writes), 3, writes)
        self.assertTrue(writes[0].startswith(b"POST /a ") and writes[0].endswith(b'{"argv":["/bin/true"]}'), writes[0])


if __name__ == "__main__":
    unittest.main()
