"""Finding the daemon, or starting a private one (and stopping it on exit)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from typing import Optional

from ._errors import DaemonUnavailable, DryExecError
from ._transport import Transport


def state_dir() -> str:
    """The daemon's state dir, as `dryexec serve` computes it."""
    home = os.environ.get("DRYEXEC_HOME")
    if not home:
        xdg = os.environ.get("XDG_STATE_HOME")
        home = os.path.join(xdg, "dryexec") if xdg else os.path.join(os.path.expanduser("~"), ".local", "state", "dryexec")
    return os.path.join(home, "serve")


def default_socket() -> str:
    """$XDG_RUNTIME_DIR/dryexec.sock, else dryexec.sock in the state dir."""
    rt = os.environ.get("XDG_RUNTIME_DIR")
    return os.path.join(rt, "dryexec.sock") if rt else os.path.join(state_dir(), "dryexec.sock")


def find_binary() -> Optional[str]:
    """$DRYEXEC_BIN, else dryexec on PATH."""
    b = os.environ.get("DRYEXEC_BIN")
    if b:
        return b
    return shutil.which("dryexec")


def _answers(t: Transport) -> bool:
    try:
        t.call("GET", "/v1/health", timeout=5)
        return True
    except DryExecError:
        return False


class Daemon:
    """A daemon this process talks to; ``started`` if this process started it
    (it is then stopped by ``stop`` or at interpreter exit)."""

    def __init__(self, transport: Transport, proc: Optional[subprocess.Popen] = None,
                 tmpdir: Optional[str] = None) -> None:
        self.transport = transport
        self._proc = proc
        self._tmpdir = tmpdir
        self._lock = threading.Lock()

    @property
    def started(self) -> bool:
        return self._proc is not None

    @classmethod
    def connect(cls, socket_path: Optional[str] = None, url: Optional[str] = None, token: Optional[str] = None,
                start: bool = True) -> "Daemon":
        """Explicit arguments first, then DRYEXEC_URL (+ DRYEXEC_TOKEN or the
        token file), DRYEXEC_SOCKET, the default socket; if none answers and
        start is true, a private daemon."""
        url = url or os.environ.get("DRYEXEC_URL")
        if url:
            token = token or os.environ.get("DRYEXEC_TOKEN") or _read_token()
            t = Transport(url=url, token=token)
            if not _answers(t):
                raise DaemonUnavailable("no dryexec daemon answers at %s" % url)
            return cls(t)
        explicit = socket_path or os.environ.get("DRYEXEC_SOCKET")
        if explicit:
            t = Transport(socket_path=explicit)
            if not _answers(t):
                raise DaemonUnavailable("no dryexec daemon answers on %s" % explicit)
            return cls(t)
        t = Transport(socket_path=default_socket())
        if os.path.exists(default_socket()) and _answers(t):
            return cls(t)
        if not start:
            raise DaemonUnavailable("no dryexec daemon answers on %s" % default_socket())
        return cls.start()

    @classmethod
    def start(cls, binary: Optional[str] = None, timeout: float = 30.0) -> "Daemon":
        """Starts `dryexec serve` on a socket in a private temp dir."""
        binary = binary or find_binary()
        if not binary:
            raise DaemonUnavailable("no dryexec daemon is running and no dryexec binary was found: "
                                    "set DRYEXEC_BIN or put dryexec on PATH (or run `dryexec serve`)")
        tmpdir = tempfile.mkdtemp(prefix="dryexec-sdk-")
        sock = os.path.join(tmpdir, "dryexec.sock")
        log = open(os.path.join(tmpdir, "serve.log"), "wb")
        try:
            proc = subprocess.Popen([binary, "serve", "--socket", sock], stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=log, close_fds=True, start_new_session=True)
        except OSError as e:
            log.close()
            shutil.rmtree(tmpdir, ignore_errors=True)
            raise DaemonUnavailable("starting %s serve: %s" % (binary, e)) from None
        log.close()
        d = cls(Transport(socket_path=sock), proc, tmpdir)
        deadline = time.monotonic() + timeout
        while True:
            if os.path.exists(sock) and _answers(d.transport):
                return d
            if proc.poll() is not None or time.monotonic() > deadline:
                msg = d._log_tail()
                d.stop()
                raise DaemonUnavailable("`%s serve` did not start: %s" % (binary, msg or "no output"))
            time.sleep(0.01)

    def _log_tail(self) -> str:
        if not self._tmpdir:
            return ""
        try:
            with open(os.path.join(self._tmpdir, "serve.log"), "rb") as f:
                return f.read()[-2000:].decode("utf-8", "replace").strip()
        except OSError:
            return ""

    def stop(self, timeout: float = 30.0) -> None:
        """Stops the daemon if this process started it: SIGTERM (it drains and
        cleans every sandbox), SIGKILL if it does not exit within timeout."""
        with self._lock:
            proc, self._proc = self._proc, None
            tmpdir, self._tmpdir = self._tmpdir, None
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)


def _read_token() -> Optional[str]:
    try:
        with open(os.path.join(state_dir(), "token")) as f:
            return f.read().strip() or None
    except OSError:
        return None
