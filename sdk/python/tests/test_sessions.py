"""Every session method, host objects (allow and deny, in the daemon and the
SDK), on the ns rung."""

import os
import pathlib
import tempfile
import unittest

from . import _env

_env.setup()

import dry_exec  # noqa: E402


class DB:
    """A host object: only query is allowed below."""

    def __init__(self) -> None:
        self.calls = []

    def query(self, flt):
        self.calls.append(("query", flt))
        return [{"id": 1, "filter": flt}]

    def drop_all(self):
        self.calls.append(("drop_all",))
        raise AssertionError("drop_all must never be called")

    def _secret(self):
        self.calls.append(("_secret",))

    def broken(self):
        raise KeyError("no such row")

    def blob(self, b):
        return b + b"!"


class Sessions(unittest.TestCase):
    def test_every_method(self) -> None:
        with dry_exec.session(rung="ns", workspace="/workspace") as s:
            self.assertEqual(s.ping()["rung"], "ns")
            self.assertEqual(s.workspace, "/workspace")
            r = s.shell("mkdir -p data && cd data && echo 'a,b' > in.csv && export STEP=1")
            self.assertIsInstance(r, dry_exec.ShellResult)
            self.assertEqual((r.exit_code, r.cwd, r.timed_out), (0, "/workspace/data", False))
            r = s.shell("echo $STEP; pwd")
            self.assertEqual(r.transcript, "1\n/workspace/data\n")
            r = s.shell("sleep 10", timeout=0.2)
            self.assertTrue(r.timed_out)
            self.assertEqual(r.exit_code, 124)

            p = s.python("import csv\nrows = list(csv.reader(open('in.csv')))\ncache['n'] = str(len(rows))\n"
                         "emit('status', {'rows': len(rows)})\nprint('rows', len(rows))\nraw = blob + b'.'\n"
                         "where = pathlib.Path('in.csv') if False else here\nmod = csv\nrows",
                         inputs={"blob": b"\x00\x01", "here": pathlib.PurePosixPath("data/in.csv")})
            self.assertIsInstance(p, dry_exec.PythonResult)
            self.assertTrue(p.ok, p.error)
            self.assertEqual(p.transcript, "rows 1\n[['a', 'b']]\n")
            self.assertEqual(p.prints[0].text, "rows 1")
            self.assertEqual(p.outputs["rows"], [["a", "b"]])
            self.assertEqual(p.outputs["raw"], b"\x00\x01.")
            self.assertEqual(p.outputs["where"], pathlib.PurePosixPath("data/in.csv"))
            self.assertNotIn("mod", p.outputs)
            p = s.python("x = object()")
            self.assertIn("x", p.outputs_skipped)
            p = s.python("1/0")
            self.assertFalse(p.ok)
            self.assertEqual(p.error.type, "ZeroDivisionError")
            p = s.python("import time; time.sleep(10)", timeout=0.3)
            self.assertTrue(p.timed_out)

            self.assertEqual(s.cache["n"], b"1")
            s.cache["k"] = "v"
            self.assertEqual(sorted(s.cache.keys()), ["k", "n"])
            self.assertEqual(s.python("cache['k']").transcript, "b'v'\n")
            del s.cache["k"]
            self.assertNotIn("k", s.cache)
            with self.assertRaises(KeyError):
                s.cache["k"]
            ev = s.emits
            self.assertEqual([(e.name, e.value) for e in ev], [("status", {"rows": 1})])

            d = s.diff()
            self.assertIsInstance(d, dry_exec.Diff)
            self.assertEqual(d.writes, {"data/in.csv": b"a,b\n"})
            self.assertEqual(d.modes["data/in.csv"], 0o644)
            self.assertEqual(d.deletes, [])
            d = s.diff(rebase=True)
            self.assertEqual(s.diff().writes, {})
            s.shell("rm /workspace/data/in.csv")
            self.assertEqual(s.diff().deletes, ["data/in.csv"])
            s.reset()
            self.assertEqual(s.diff().deletes, [])
            self.assertEqual(s.shell("cat /workspace/data/in.csv").transcript, "a,b\n")

            src = tempfile.mkdtemp(dir=_env._ROOT)
            os.makedirs(os.path.join(src, "pkg"))
            with open(os.path.join(src, "pkg", "m.py"), "w") as f:
                f.write("X = 42\n")
            os.symlink("pkg/m.py", os.path.join(src, "link"))
            self.assertEqual(s.push_dir(src), 3)
            self.assertEqual(s.shell("cd /workspace && cat link && ls").transcript, "X = 42\nlink\npkg\n")
            self.assertEqual(s.diff().writes, {})
        with self.assertRaises(dry_exec.SessionLost):
            s.shell("true")

    def test_shell_workspace_env_and_diff_measures(self) -> None:
        with dry_exec.session(rung="ns") as s:
            self.assertEqual(s.info.shell, "/bin/bash")
            self.assertEqual(s.shell("printf '%s' $'a\\nb' | wc -l").transcript.strip(), "1")
            self.assertEqual(s.shell('(cd / && echo "$DRYEXEC_WORKSPACE")').transcript, s.workspace + "\n")
            d = s.diff()
            self.assertFalse(d)
            self.assertTrue(d.empty and d.is_empty())
            self.assertEqual((len(d), d.paths), (0, []))
            s.shell("printf x > f && chmod 600 f")
            s.diff(rebase=True)
            s.shell("chmod 700 f")
            d = s.diff()
            self.assertTrue(d)
            self.assertFalse(d.empty)
            self.assertEqual((len(d), d.paths, d.modes), (1, ["f"], {"f": 0o700}))
            s.shell("rm f && ln -s elsewhere f")
            d = s.diff()
            self.assertEqual((d.deletes, d.links), (["f"], {"f": "elsewhere"}))
        with dry_exec.session(rung="ns", shell="sh") as s:
            self.assertEqual(s.info.shell, "/bin/sh")
            self.assertEqual(s.shell('echo "${BASH_VERSION:-none}"').transcript, "none\n")

    def test_host_objects_allow_and_deny(self) -> None:
        db = DB()
        with dry_exec.session(rung="ns", host_objects={"db": db}, allow={"db": {"query", "broken", "blob", "_secret"}}) as s:
            p = s.python("rows = host.db.query('active')")
            self.assertTrue(p.ok, p.error)
            self.assertEqual(p.outputs["rows"], [{"id": 1, "filter": "active"}])
            self.assertEqual(s.python("host.db.blob(b'x')").transcript, "b'x!'\n")
            for code in ("host.db.drop_all()", "host.db._secret()", "host.nope.query(1)"):
                p = s.python(code)
                self.assertFalse(p.ok, code)
                self.assertIn(p.error.type, ("PermissionError", "AttributeError"), (code, p.error))
            p = s.python("host.db.broken()")
            self.assertEqual(p.error.type, "RuntimeError")
            self.assertIn("KeyError", p.error.message)
        self.assertEqual(db.calls, [("query", "active")])

    def test_sdk_checks_its_allowlist_too(self) -> None:
        db = DB()
        with dry_exec.session(rung="host", host_objects={"db": db}, allow={"db": {"query"}}) as s:
            # A call the daemon should never forward: the SDK refuses it itself.
            for method in ("drop_all", "_secret", "__init__"):
                a = s._answer({"call_id": "hc_x", "object": "db", "method": method, "args": []})
                self.assertEqual(a["error"]["code"], "permission", method)
            a = s._answer({"call_id": "hc_x", "object": "other", "method": "query", "args": []})
            self.assertEqual(a["error"]["code"], "permission")
            a = s._answer({"call_id": "hc_x", "object": "db", "method": "query", "args": [{"type": "json", "json": 1}]})
            self.assertEqual(a["value"], {"type": "json", "json": [{"id": 1, "filter": 1}]})
        self.assertEqual(db.calls, [("query", 1)])

    def test_allowlist_refusals_at_open(self) -> None:
        for objs, allow in [({"db": DB()}, {}), ({"db": DB()}, {"db": {"*"}}), ({"db": DB()}, {"db": {"nosuch"}}),
                            ({}, {"db": {"query"}}), ({"db": DB()}, {"db": "query"})]:
            with self.assertRaises(dry_exec.PolicyError, msg=(objs, allow)):
                dry_exec.session(rung="host", host_objects=objs, allow=allow)

    def test_net_plumbing(self) -> None:
        # No connection is tried here (this suite does not run in a network
        # namespace of its own): test/network covers the traffic through
        # the HTTP API; this checks the SDK's side of it.
        with dry_exec.session(rung="ns", net=["none"]) as s:
            r = s.shell("true")
            self.assertIsInstance(r.network, list)
            self.assertEqual(r.network, [])
            p = s.python("x = 1")
            self.assertEqual(p.network, [])
            self.assertEqual(s.network, [])
            self.assertIsInstance(s.info.warnings, list)
        with self.assertRaises(dry_exec.BadRequest):
            dry_exec.session(rung="ns", net=["bogus"])
        with self.assertRaises(dry_exec.IsolationUnavailable):
            dry_exec.session(rung="host", net=["none"])


if __name__ == "__main__":
    unittest.main()


class Forks(unittest.TestCase):
    def test_fork_compare_keep(self) -> None:
        with dry_exec.session(rung="ns") as s:
            s.shell("echo base > a && mkdir sub && cd sub && export STEP=2")
            s.cache["k"] = "v"
            b0, b1 = s.fork(n=2)
            for b in (b0, b1):
                r = b.shell('basename "$PWD"; echo $STEP; cat ../a')
                self.assertEqual(r.stdout, "sub\n2\nbase\n")
                self.assertEqual(b.cache["k"], b"v")
                self.assertTrue(b.diff().empty)
            b0.shell("echo zero > ../a; echo x > ../both")
            b1.shell("echo one > ../a; echo x > ../both")
            self.assertEqual(sorted(b1.diff(origin=True).writes), ["a", "both"])
            cmp = dry_exec.compare(b0, b1)
            self.assertEqual({p["path"]: p["agreement"] for p in cmp["paths"]}, {"a": "differ", "both": "alike"})
            self.assertEqual([x["name"] for x in cmp["sides"]], [b0.id, b1.id])
            self.assertEqual({p["path"]: p["agreement"] for p in s.compare(b1)["paths"]}, {"a": "differ", "both": "partial"})
            r = s.keep(b1)
            self.assertEqual((r["kept"], r["discarded"]), (b1.id, [b0.id]))
            self.assertEqual(s.shell("cat ../a ../both").stdout, "one\nx\n")
            with self.assertRaises(dry_exec.SessionLost):
                b0.shell("true")
            with self.assertRaises(dry_exec.BadRequest):
                s.diff(origin=True)


class Park(unittest.TestCase):
    def test_park_refused_off_vm(self) -> None:
        """Only the vm rung parks: elsewhere park() raises with the daemon's
        code and the session goes on; nothing is listed as parked."""
        client = dry_exec.default_client()
        with dry_exec.session(rung="ns") as s:
            with self.assertRaises(dry_exec.DryExecError) as cm:
                s.park()
            self.assertEqual(cm.exception.code, "park_unsupported")
            self.assertEqual(s.shell("echo alive").transcript, "alive\n")
            self.assertEqual(client.parked(), [])
            with self.assertRaises(dry_exec.NotFound):
                client.resume(s.id)

    @unittest.skipUnless(os.environ.get("DRYEXEC_TEST_VM") and os.environ.get("DRYEXEC_GUEST"),
                         "set DRYEXEC_TEST_VM=1 and DRYEXEC_GUEST to a static guest to boot VMs")
    def test_park_resume_vm(self) -> None:
        """A vm session parks (listed, not live) and resumes where it was."""
        client = dry_exec.default_client()
        with dry_exec.session(rung="vm", cache={"k": b"v"}) as s:
            self.assertEqual(s.shell("mkdir d && cd d && echo hi > a.txt && export X=1").exit_code, 0)
            p = s.park()
            self.assertEqual((p["session_id"], p["rung"]), (s.id, "vm"))
            self.assertGreater(p["bytes"], 0)
            self.assertEqual([x["session_id"] for x in client.parked()], [s.id])
            with self.assertRaises(dry_exec.SessionLost):
                s.shell("true")
            s.resume()
            self.assertEqual(s.shell("pwd; echo $X; cat a.txt").transcript, "/workspace/d\n1\nhi\n")
            self.assertEqual(s.cache["k"], b"v")
            self.assertEqual(client.parked(), [])
