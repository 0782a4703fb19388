"""Trials and sessions on an OCI image (run(image=...), session(image=...)),
and the commit rule for them (commit(to=...)). The image is an OCI layout the
Go harness builds (TestPythonSDK: DRYEXEC_TEST_IMAGE): the host's sh and cat
with their libraries, /src/a.txt, Env WHO=image, WorkingDir /src."""

import os
import tempfile
import unittest

from . import _env

_env.setup()

import dry_exec  # noqa: E402

IMAGE = os.environ.get("DRYEXEC_TEST_IMAGE", "")


@unittest.skipUnless(IMAGE, "DRYEXEC_TEST_IMAGE is not set (run through `go test ./server -run TestPythonSDK` as root)")
class Images(unittest.TestCase):
    def test_trial_on_image_and_commit_rule(self) -> None:
        d = dry_exec.run('echo "$WHO $PWD"; echo b >> a.txt; echo n > /src/new.txt; echo o > /outside.txt', image=IMAGE)
        self.assertEqual(d.stdout, "image /src\n", d.stderr)
        self.assertEqual(sorted((c.op, c.path) for c in d.files),
                         [("create", "/outside.txt"), ("create", "/src/new.txt"), ("modify", "/src/a.txt")])
        self.assertEqual(d.image["workspace"], "/src")
        self.assertTrue(d.image["digest"].startswith("sha256:"))
        target = tempfile.mkdtemp(dir=_env._ROOT)
        with open(os.path.join(target, "a.txt"), "w") as f:
            f.write("a\n")
        # Refused without a target, and the target is untouched.
        with self.assertRaises(dry_exec.ImageCommit):
            d.commit(force=True)
        self.assertEqual(sorted(os.listdir(target)), ["a.txt"])
        applied = d.commit(force=True, to=target)
        self.assertEqual(sorted(c.path for c in applied), [os.path.join(target, "a.txt"), os.path.join(target, "new.txt")])
        with open(os.path.join(target, "a.txt")) as f:
            self.assertEqual(f.read(), "a\nb\n")
        self.assertFalse(os.path.exists("/outside.txt"))

    def test_session_on_image(self) -> None:
        with dry_exec.session(image=IMAGE, env={"PATH": "/bin", "EXTRA": "caller"}) as s:
            r = s.shell('echo "$WHO $EXTRA"; cat /src/a.txt; echo w > w.txt')
            self.assertEqual(r.stdout, "image caller\na\n", r.stderr)
            self.assertEqual(s.diff().writes, {"w.txt": b"w\n"})

    def test_missing_image(self) -> None:
        with self.assertRaises(dry_exec.ImageUnavailable):
            dry_exec.run("true", image="oci:/nonexistent/layout")


if __name__ == "__main__":
    unittest.main()
