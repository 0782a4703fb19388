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
        path = os.path.join(tempfile.mkdtemp(dir=_env._ROOT), "s.sock")
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(path)
        srv.listen(4)
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


if __name__ == "__main__":
    unittest.main()
