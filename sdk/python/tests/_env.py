"""Shared set-up: a private daemon (DRYEXEC_BIN), a private trial store, and a
`python` on PATH for the seeds' `dry_exec.run("python seed_data.py")`."""

import os
import sys
import tempfile
import unittest

_ROOT = tempfile.mkdtemp(prefix="dry-exec-tests-")


def setup() -> str:
    if not os.environ.get("DRYEXEC_BIN"):
        raise unittest.SkipTest("DRYEXEC_BIN is not set (run through `go test ./server -run TestPythonSDK`)")
    os.environ.setdefault("DRYEXEC_HOME", os.path.join(_ROOT, "home"))
    # No default socket: the SDK starts its own daemon.
    os.environ["XDG_RUNTIME_DIR"] = os.path.join(_ROOT, "run")
    os.makedirs(os.environ["XDG_RUNTIME_DIR"], exist_ok=True)
    shim = os.path.join(_ROOT, "bin")
    os.makedirs(shim, exist_ok=True)
    if not os.path.exists(os.path.join(shim, "python")):
        os.symlink(sys.executable, os.path.join(shim, "python"))
    os.environ["PATH"] = shim + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin")
    return _ROOT
