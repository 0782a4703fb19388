"""The SDK surface of #20 points 1-4 and 8: Python values in the cache (and
Pickled, never unpickled here unless asked), host objects as globals with
keyword arguments, per-exec caps, print objects and the echo entry, the
renderer and the lazily started runner in ping()."""

import os
import tempfile
import unittest

from . import _env

_env.setup()

import dry_exec  # noqa: E402


class Store:
    def __init__(self) -> None:
        self.calls = []

    def find(self, name, limit=10, order="asc"):
        self.calls.append(("find", name, limit, order))
        return {"name": name, "limit": limit, "order": order}

    def drop(self, **kw):
        self.calls.append(("drop", kw))


class Touch:
    """Unpickled, it creates a file: where it appears says where it ran."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, ("touch " + self.path,))


RUNGS = ("host", "ns")


class Values(unittest.TestCase):
    def test_cache_python_values(self) -> None:
        for rung in RUNGS:
            with self.subTest(rung=rung), dry_exec.session(rung=rung, cache={"seed": {"a": [1, 2]}, "raw": b"\x00"}) as s:
                p = s.python("n = cache['seed']['a'][1]\nraw = cache['raw']\ncache['x'] = {'k': (1, 2)}\ncache['s'] = 'str'")
                self.assertTrue(p.ok, p.error)
                self.assertEqual((p.outputs["n"], p.outputs["raw"]), (2, b"\x00"))
                got = s.cache["x"]
                # Never unpickled on the host unless asked.
                self.assertIsInstance(got, dry_exec.Pickled)
                self.assertEqual(got.loads(), {"k": (1, 2)})
                self.assertEqual(s.cache["s"], b"str")
                s.cache["y"] = 41  # pickled here, unpickled in the sandbox
                self.assertEqual(s.python("y = cache['y'] + 1").outputs["y"], 42)
                self.assertIsInstance(s.cache["y"], dry_exec.Pickled)
                with self.assertRaises(dry_exec.NotRepresentable):
                    s.cache["f"] = lambda: 1

    def test_cache_pickle_runs_only_in_the_sandbox(self) -> None:
        here = os.path.join(tempfile.mkdtemp(), "ran-on-host")
        with dry_exec.session(rung="ns", cache={"t": Touch(here)}) as s:
            p = s.python("cache['t']")
            self.assertTrue(p.ok, p.error)
            self.assertFalse(os.path.exists(here), "the pickle ran on the host")
            # A pickle the sandbox made that would run code when unpickled:
            # reading it here does not unpickle it.
            p = s.python("import os\nclass Evil:\n    def __reduce__(self):\n        return (os.system, ('touch ' + here,))\n"
                         "cache['evil'] = Evil()", inputs={"here": here})
            self.assertTrue(p.ok, p.error)
            self.assertIsInstance(s.cache["evil"], dry_exec.Pickled)
            self.assertFalse(os.path.exists(here), "reading the cache unpickled on the host")

    def test_cache_readonly_per_exec(self) -> None:
        with dry_exec.session(rung="host", cache={"a": "1"}) as s:
            p = s.python("cache['a'] = 2", cache_readonly=True)
            self.assertFalse(p.ok)
            self.assertEqual(p.error.type, "PermissionError")
            self.assertEqual(s.cache["a"], b"1")
            self.assertTrue(s.python("cache['a'] = 2").ok)

    def test_host_globals_and_kwargs(self) -> None:
        st = Store()
        with dry_exec.session(rung="host", host_objects={"store": st}, allow={"store": {"find", "drop"}}) as s:
            p = s.python("r = store.find('x', limit=2)\nq = host.store.find('y', order='desc')")
            self.assertTrue(p.ok, p.error)
            self.assertEqual(p.outputs["r"], {"name": "x", "limit": 2, "order": "asc"})
            self.assertEqual(p.outputs["q"], {"name": "y", "limit": 10, "order": "desc"})
            for code in ("store.drop(__class__=1)", "store.drop(_x=1)", "store.find('x', limit=object())"):
                p = s.python(code)
                self.assertFalse(p.ok, code)
                self.assertIn(p.error.type, ("PermissionError", "TypeError"), (code, p.error))
            # The SDK refuses a private keyword the daemon should never forward.
            a = s._answer({"call_id": "hc_x", "object": "store", "method": "drop", "args": [], "kwargs": {"__dict__": {"type": "json", "json": 1}}})
            self.assertEqual(a["error"]["code"], "permission")
        self.assertEqual([c[0] for c in st.calls], ["find", "find"])
        with dry_exec.session(rung="host", host_objects={"store": Store()}, allow={"store": {"find"}}, host_globals=False) as s:
            self.assertEqual(s.python("store").error.type, "NameError")

    def test_caps_prints_echo_ping(self) -> None:
        with dry_exec.session(rung="host") as s:
            ping = s.ping()
            self.assertEqual(ping["renderer"], "repr")
            self.assertFalse(ping.get("python_ready", False))
            p = s.python("print('x' * 50, [1, 2, 3])\nprint('y')\nprint('z')\n{'a': 1}", caps={"entry": 10, "total": 12})
            self.assertTrue(p.ok, p.error)
            first = p.prints[0]
            self.assertTrue(first.truncated)
            self.assertTrue(first.text.startswith("x" * 10) and first.text.endswith("[dryexec: output dropped by caps]"))
            self.assertEqual([(o.type, o.len) for o in first.objects], [("str", 50), ("list", 3)])
            self.assertEqual(p.prints[-1].kind, "dropped")
            self.assertTrue(s.ping()["python_ready"])
            p = s.python("[1, 2]")
            self.assertEqual((p.prints[-1].kind, p.prints[-1].text, p.prints[-1].objects[0].len), ("echo", "[1, 2]", 2))
            r = s.shell("seq 1000", caps={"total": 20})
            self.assertTrue(r.truncated)
            self.assertTrue(r.stdout.startswith("[dryexec: output dropped by caps]\n") and r.stdout.endswith("1000\n"))
            with self.assertRaises(ValueError):
                s.python("1", caps={"lines": 3})


if __name__ == "__main__":
    unittest.main()
