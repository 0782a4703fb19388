"""StateDelta attributes, commit/discard, @dry_run, the async client, errors."""

import asyncio
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import unittest

from . import _env

_env.setup()

import dry_exec  # noqa: E402
from dry_exec import (Action, CommitConflict, DryExecClient, Environment, IsolationUnavailable,  # noqa: E402
                      NotRepresentable, PolicyError)


@dry_exec.dry_run
def add_and_write(a, b):
    with open("sum.txt", "w") as f:
        f.write(str(a + b))
    print("adding")
    return {"sum": a + b}


class Trials(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(dir=_env._ROOT)

    def test_statedelta_attributes(self) -> None:
        d = dry_exec.run("echo out; echo err >&2; echo x > f; exit 3", cwd=self.dir)
        self.assertIsInstance(d, dry_exec.StateDelta)
        self.assertEqual((d.stdout, d.stderr, d.exit_code), ("out\n", "err\n", 3))
        self.assertEqual(d.schema, "dryexec.statedelta/v1")
        self.assertTrue(d.trial_id.startswith("tr_"))
        self.assertEqual(d.network, [])
        self.assertIsInstance(d.memory, dry_exec.Memory)
        self.assertEqual(d.violations, [])
        self.assertEqual(d.total_bytes_mutated, 2 + d.memory.bytes_written)  # file + memory bytes
        self.assertGreater(d.duration_nanos, 0)
        self.assertIsInstance(d.fs_mutations[0], dry_exec.FileChange)
        self.assertIn(d.decision.choice, ("auto_commit", "review", "block"))
        self.assertTrue(d.receipt.signature)
        self.assertEqual(dry_exec.default_client().trial(d.trial_id).trial_id, d.trial_id)

    def test_commit_paths_and_discard(self) -> None:
        d = dry_exec.run(["sh", "-c", "echo a > a; echo b > b"], cwd=self.dir)
        applied = d.commit(paths=[os.path.join(self.dir, "a")])
        self.assertEqual([c.path for c in applied], [os.path.join(self.dir, "a")])
        self.assertTrue(os.path.exists(os.path.join(self.dir, "a")))
        self.assertFalse(os.path.exists(os.path.join(self.dir, "b")))
        # The rest stays to commit: a commit applies it, and then it is done.
        with self.assertRaises(dry_exec.AlreadyDone):
            d.commit(paths=[os.path.join(self.dir, "a")])
        self.assertEqual([c.path for c in d.commit()], [os.path.join(self.dir, "b")])
        with self.assertRaises(dry_exec.AlreadyDone):
            d.commit()
        d2 = dry_exec.run("echo c > c", cwd=self.dir)
        d2.discard()
        with self.assertRaises(dry_exec.AlreadyDone):
            d2.commit()
        self.assertFalse(os.path.exists(os.path.join(self.dir, "c")))

    def test_commit_conflict(self) -> None:
        p = os.path.join(self.dir, "x")
        with open(p, "w") as f:
            f.write("one\n")
        d = dry_exec.run("echo two > x", cwd=self.dir)
        with open(p, "w") as f:
            f.write("changed meanwhile\n")
        with self.assertRaises(CommitConflict) as cm:
            d.commit()
        self.assertEqual([c["path"] for c in cm.exception.conflicts], [p])
        with open(p) as f:
            self.assertEqual(f.read(), "changed meanwhile\n")

    def test_dry_run_return_value(self) -> None:
        cwd = os.getcwd()
        os.chdir(self.dir)
        try:
            d = add_and_write(2, 3)
        finally:
            os.chdir(cwd)
        self.assertEqual(d.return_value, {"sum": 5})
        self.assertIsNone(d.error)
        self.assertEqual(d.stdout, "adding\n")
        self.assertEqual([m.path for m in d.fs_mutations], [os.path.join(self.dir, "sum.txt")])
        self.assertFalse(os.path.exists(os.path.join(self.dir, "sum.txt")))

    def test_streamed_output(self) -> None:
        got = []
        d = dry_exec.default_client().run("echo one; echo two >&2", cwd=self.dir, on_output=lambda s, t: got.append((s, t)))
        self.assertEqual(sorted(got), [("stderr", "two\n"), ("stdout", "one\n")])
        self.assertEqual(d.stdout, "one\n")

    def test_streamed_output_is_live(self) -> None:
        # on_output gets the output while the command runs: the command
        # prints "ready" and sleeps a minute; the callback stops the call on
        # "ready". Had the output come only at the end, the stop would come
        # after the minute.
        class Stop(Exception):
            pass

        def stop(stream: str, text: str) -> None:
            if "ready" in text:
                raise Stop()

        t0 = time.monotonic()
        with self.assertRaises(Stop):
            dry_exec.default_client().run("echo ready; sleep 60", cwd=self.dir, timeout=120, on_output=stop)
        self.assertLess(time.monotonic() - t0, 30)

    def test_environment_is_the_policy(self) -> None:
        env = Environment(name="only-build", allowed_mutation_targets={"build/**"})
        c = dry_exec.default_client()
        blocked = c.execute(Action(action_id="a1", payload={"command": "echo x > notbuild.txt", "cwd": self.dir}), env)
        self.assertEqual(blocked.decision.choice, "block")
        ok = c.execute(Action(action_id="a2", payload={"command": "mkdir build && echo x > build/o", "cwd": self.dir}), env)
        self.assertNotEqual(ok.decision.choice, "block", ok.decision.reasons)

    def test_async_client(self) -> None:
        async def main():
            c = DryExecClient()
            d = await c.run("echo hi", cwd=self.dir)
            s = await c.session(rung="ns")
            async with s:
                r = await s.shell("echo in-session")
            return d, r

        d, r = asyncio.run(main())
        self.assertEqual(d.stdout, "hi\n")
        self.assertEqual(r.transcript, "in-session\n")


class Errors(unittest.TestCase):
    def test_isolation_unavailable(self) -> None:
        with self.assertRaises(IsolationUnavailable) as cm:
            dry_exec.run("true", rung="vm")
        self.assertEqual(cm.exception.rung, "vm")
        self.assertTrue(cm.exception.missing)

    def test_policy_error(self) -> None:
        with self.assertRaises(PolicyError):
            dry_exec.run("true", environment=Environment(name="bad", allowed_mutation_targets={"[unclosed"}))
        with self.assertRaises(PolicyError):
            dry_exec.session(host_objects={"db": object()}, allow={"db": {"*"}})
        with self.assertRaises(PolicyError):
            dry_exec.session(host_objects={"db": object()})

    def test_not_representable(self) -> None:
        with self.assertRaises(NotRepresentable):
            add_and_write(object(), 1)
        with dry_exec.session(rung="host") as s:
            with self.assertRaises(NotRepresentable):
                s.python("x", inputs={"x": {1, 2}})

    def test_session_lost(self) -> None:
        s = dry_exec.session(rung="host")
        s.close()
        with self.assertRaises(dry_exec.SessionLost):
            s.shell("true")
        s = dry_exec.session(rung="ns")
        dry_exec.default_client().transport.call("DELETE", "/v1/sessions/" + s.id)
        with self.assertRaises(dry_exec.SessionLost):
            s.shell("true")

    def test_bad_net_spec(self) -> None:
        with self.assertRaises(dry_exec.BadRequest):
            dry_exec.run("true", environment=Environment(net=["mock:relative.yaml"]))

    def test_net_contradictions_and_bad_input(self) -> None:
        # Refused in either order, before anything runs, with what to do.
        for net in (["none", "allow:example.com:443"], ["allow:example.com:443", "none"]):
            with self.assertRaisesRegex(dry_exec.BadRequest, "contradicts"):
                dry_exec.run("true", net=net)
        with self.assertRaisesRegex(dry_exec.BadRequest, "own loopback"):
            dry_exec.run("true", net=["allow:127.0.0.1:8080"])
        with self.assertRaisesRegex(dry_exec.BadRequest, "unknown; choose one of"):
            dry_exec.run("true", rung="nope")
        with self.assertRaisesRegex(dry_exec.BadRequest, "not a directory|does not exist|cwd"):
            dry_exec.run("true", cwd="/nonexistent/dir")
        # One spec as a str is that spec, not its characters.
        self.assertEqual(dry_exec.run("true", net="none").exit_code, 0)
        d = dry_exec.run("echo a > a", cwd=tempfile.mkdtemp(dir=_env._ROOT))
        with self.assertRaisesRegex(dry_exec.BadRequest, "changed nothing at or beneath"):
            d.commit(paths=["/nonexistent/b"])
        d.discard()

    def test_blocked_needs_force(self) -> None:
        # A trial the policy blocks is refused until a person forces it; the
        # override is recorded with the trial.
        d = dry_exec.run("echo x > f.txt; mkdir -p /etc/dry-exec-sdk-block && echo y > /etc/dry-exec-sdk-block/y",
                         cwd=tempfile.mkdtemp(dir=_env._ROOT))
        self.assertEqual(d.decision.choice, "block")
        here = os.path.join(d.action.cwd, "f.txt")
        with self.assertRaises(dry_exec.Blocked) as cm:
            d.commit(paths=[here])
        self.assertIsInstance(cm.exception, PermissionError)
        self.assertFalse(os.path.exists(here))
        applied = d.commit(paths=[here], force=True)
        self.assertEqual([c.path for c in applied], [here])
        self.assertFalse(os.path.exists("/etc/dry-exec-sdk-block"))

    def test_corrupt_trial(self) -> None:
        # A stored trial whose delta is torn: showing it says corrupt, as
        # the daemon's 500 corrupt maps to Corrupt.
        d = dry_exec.run("echo x > f.txt")
        path = pathlib.Path(os.environ["DRYEXEC_HOME"], "trials", d.trial_id, "delta.json")
        data = path.read_bytes()
        path.write_bytes(data[:len(data) // 2])
        with self.assertRaises(dry_exec.Corrupt):
            dry_exec.default_client().transport.call("GET", "/v1/trials/" + d.trial_id)
        dry_exec.default_client().transport.call("POST", "/v1/trials/" + d.trial_id + "/discard")

    def test_error_codes(self) -> None:
        from dry_exec._errors import from_response
        for code, cls in (("no_space", dry_exec.NoSpace), ("corrupt", dry_exec.Corrupt),
                          ("not_found", dry_exec.NotFound), ("busy", dry_exec.Busy)):
            self.assertIsInstance(from_response(500, {"error": {"code": code, "message": "m"}}), cls)
        self.assertIsInstance(from_response(507, {"error": {"code": "no_space", "message": "m"}}), OSError)

    def test_bad_request(self) -> None:
        # The SDK makes paths absolute itself; the daemon refuses traversal.
        with self.assertRaises(dry_exec.BadRequest):
            dry_exec.default_client().transport.call("POST", "/v1/trials", {"argv": ["true"], "cwd": "/tmp/../etc"})
        with self.assertRaises(dry_exec.BadRequest):
            dry_exec.default_client().transport.call("POST", "/v1/trials", {"argv": ["true"], "cwd": "/", "x": 1})


class Daemon(unittest.TestCase):
    def test_private_daemon_started_and_stopped(self) -> None:
        c = dry_exec.Client()
        self.assertTrue(c.started_daemon)
        sock = c.transport.socket_path
        self.assertTrue(os.path.exists(sock))
        self.assertEqual(oct(os.stat(sock).st_mode & 0o777), "0o600")
        self.assertEqual(c.version()["api"], "v1")
        # A second client finds this daemon by its socket instead of starting one.
        c2 = dry_exec.Client(socket_path=sock)
        self.assertFalse(c2.started_daemon)
        c2.close()
        self.assertTrue(c2.health()["ok"])
        c.close()
        self.assertFalse(os.path.exists(sock))
        with self.assertRaises(dry_exec.DaemonUnavailable):
            c.health()

    def test_no_binary(self) -> None:
        old = os.environ.pop("DRYEXEC_BIN")
        path = os.environ["PATH"]
        os.environ["PATH"] = "/nonexistent"
        try:
            with self.assertRaises(dry_exec.DaemonUnavailable) as cm:
                dry_exec.Client()
            self.assertIn("DRYEXEC_BIN", str(cm.exception))
        finally:
            os.environ["DRYEXEC_BIN"], os.environ["PATH"] = old, path

    def test_pip_install_offline(self) -> None:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        target = tempfile.mkdtemp(dir=_env._ROOT)
        r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--quiet",
                            "--disable-pip-version-check", "--target", target, root],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.exists(os.path.join(target, "dry_exec", "py.typed")))
        r = subprocess.run([sys.executable, "-c", "import dry_exec, sys; print(dry_exec.__file__)"],
                           capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=target), cwd=target)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(pathlib.Path(r.stdout.strip()).is_relative_to(target))


if __name__ == "__main__":
    unittest.main()
