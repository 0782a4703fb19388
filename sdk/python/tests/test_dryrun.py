"""@dry_run sees what the function sees: its module's names, its imports and
its closure travel with it; what cannot travel is refused before any trial;
an exception in the trial is an error the caller cannot miss."""

import datetime
import json as jsonlib
import os
import pathlib
import tempfile
import threading
import unittest
import warnings
from os.path import join as pjoin

from . import _env

_env.setup()

import dry_exec  # noqa: E402
from dry_exec import NotRepresentable, TrialFunctionError, TrialFunctionWarning  # noqa: E402

RATE = 0.25
LIMITS = {"daily": (100, 200), "ids": {1, 2}, "raw": b"\x00\xff"}
STARTED = datetime.date(2024, 5, 1)
ROOT = pathlib.PurePosixPath("/srv/app")
LOCK = threading.Lock()
ADD = lambda a, b: a + b  # noqa: E731


def fee(amount):
    return amount * RATE


class Ledger:
    def __init__(self, owner):
        self.owner = owner

    def line(self, amount):
        return "%s:%s" % (self.owner, fee(amount))


@dry_exec.dry_run
def uses_module_names(amount):
    return [fee(amount), Ledger("ada").line(amount), jsonlib.dumps(LIMITS["daily"]), sorted(LIMITS["ids"]),
            LIMITS["raw"].hex(), STARTED.isoformat(), pjoin(str(ROOT), "x"), os.sep]


def make_closure(k):
    @dry_exec.dry_run
    def inner(x):
        return x * k + fee(x)
    return inner


@dry_exec.dry_run
def uses_lock():
    with LOCK:
        return 1


@dry_exec.dry_run
def uses_lambda():
    return ADD(1, 2)


@dry_exec.dry_run
def writes(path, text):
    with open(path, "w") as f:
        f.write(text)
    return len(text)


@dry_exec.dry_run
def fails(n):
    if n > 1:
        raise ValueError("n is %d" % n)
    return n


@dry_exec.dry_run(raise_errors=True)
def fails_loudly():
    raise KeyError("account")


@dry_exec.dry_run
def returns_object():
    return Ledger("x")


@dry_exec.dry_run
async def coroutine(x):
    return x + 1


class DryRun(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(dir=_env._ROOT)

    def test_globals_imports_classes(self) -> None:
        d = uses_module_names(8)
        self.assertTrue(d.ok, d.stderr)
        self.assertEqual(d.return_value, [2.0, "ada:2.0", "[100, 200]", [1, 2], "00ff", "2024-05-01", "/srv/app/x", "/"])

    def test_closure(self) -> None:
        d = make_closure(3)(4)
        self.assertTrue(d.ok, d.stderr)
        self.assertEqual(d.return_value, 13.0)

    def test_refused_before_the_trial(self) -> None:
        c = dry_exec.default_client()
        before = len(c.trials())
        for fn, want in [(uses_lock, "global LOCK of uses_lock is a _thread.lock"), (uses_lambda, "lambda")]:
            with self.subTest(fn=fn.__name__):
                with self.assertRaisesRegex(NotRepresentable, want):
                    fn()
        with self.assertRaisesRegex(NotRepresentable, "argument 1 of fails is a threading"):
            fails(threading.Event())
        self.assertEqual(len(c.trials()), before, "no trial ran")

    def test_exception_in_the_trial(self) -> None:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            d = fails(2)
        self.assertEqual([x.category for x in w], [TrialFunctionWarning])
        self.assertIn("ValueError: n is 2", str(w[0].message))
        self.assertFalse(d.ok)
        self.assertEqual(d.error, "ValueError: n is 2")
        self.assertIsInstance(d.exception, TrialFunctionError)
        with self.assertRaises(TrialFunctionError):
            d.return_value
        with self.assertRaises(TrialFunctionError):
            d.raise_for_error()
        self.assertIn("in fails", d.exception.traceback)
        self.assertIn("ValueError", repr(d))  # repr never raises
        self.assertEqual(fails(1).return_value, 1)
        with self.assertRaises(TrialFunctionError) as cm:
            fails_loudly()
        self.assertEqual(cm.exception.type, "KeyError")
        self.assertEqual(cm.exception.delta.exit_code, 1)

    def test_bytes_mutated_counts_files_and_memory(self) -> None:
        p = os.path.join(self.dir, "out.txt")
        d = writes(p, "x" * 5000)
        self.assertEqual(d.return_value, 5000)
        self.assertEqual(d.totals.bytes_written, 5000)
        self.assertGreater(d.memory.bytes_written, 0)
        self.assertEqual(d.total_bytes_mutated, 5000 + d.memory.bytes_written)
        self.assertFalse(os.path.exists(p), "the host is untouched")
        d.commit()
        with open(p) as f:
            self.assertEqual(len(f.read()), 5000)

    def test_return_values(self) -> None:
        d = returns_object()
        self.assertTrue(d.return_repr)
        self.assertIn("Ledger object", d.return_value)
        self.assertEqual(coroutine(1).return_value, 2)


if __name__ == "__main__":
    unittest.main()
