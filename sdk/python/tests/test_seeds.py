"""The seed's three snippets, verbatim (only their print output is captured)."""

import asyncio
import contextlib
import io
import os
import re
import tempfile
import unittest

from . import _env

_env.setup()

import dry_exec  # noqa: E402


# ---- snippet 3, verbatim (module level, as in the seed)
@dry_exec.dry_run
def update_balance(account_id: str, amount: int):
    # Runs in ephemeral sandbox; database is untouched
    db.execute("UPDATE accounts SET balance = balance + $1 WHERE id = $2", amount, account_id)  # noqa: F821


class SeedSnippets(unittest.TestCase):
    def setUp(self) -> None:
        self.cwd = os.getcwd()
        self.dir = tempfile.mkdtemp(dir=_env._ROOT)
        os.chdir(self.dir)

    def tearDown(self) -> None:
        os.chdir(self.cwd)

    def test_direct_ephemeral_client_execution(self) -> None:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            # ---- snippet 2, verbatim
            import asyncio
            from dry_exec import Action, DryExecClient, Environment

            async def main():
                client = DryExecClient()
                env = Environment(name="sandbox", allowed_mutation_targets={"*"})
                action = Action(
                    action_id="act_001",
                    target_resource="shell_command",
                    mutation_type="execute",
                    payload={"command": ["/bin/sh", "-c", "echo hello > test.txt"]},
                )

                delta = await client.execute_ephemeral_action(env, action)
                print(f"Decision: {delta.decision.choice}, Risk: {delta.decision.risk_score}")
                print(f"Filesystem mutations: {delta.fs_mutations}")

            asyncio.run(main())
        text = out.getvalue()
        self.assertRegex(text, r"Decision: (auto_commit|review|block), Risk: [0-9.]+\n")
        self.assertIn(os.path.join(self.dir, "test.txt"), text)
        self.assertFalse(os.path.exists("test.txt"), "the trial changed the host")

    def test_dry_run_decorator(self) -> None:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            delta = update_balance("acc_101", 500)
            print(f"{delta.total_bytes_mutated} bytes mutated in {delta.duration_nanos}ns")
        self.assertRegex(out.getvalue(), r"^0 bytes mutated in [1-9][0-9]*ns\n$")
        # `db` exists only in the caller's imagination: the trial says so.
        self.assertEqual(delta.error, "NameError: name 'db' is not defined")
        self.assertEqual(delta.exit_code, 1)
        self.assertIsNone(delta.return_value)

    def test_functional_run(self) -> None:
        with open("seed_data.py", "w") as f:
            f.write("open('users.csv', 'w').write('id,name\\n1,ada\\n')\nprint('seeded')\n")
        delta = dry_exec.run("python seed_data.py")
        self.assertEqual(delta.exit_code, 0, delta.stderr)
        self.assertEqual(delta.stdout, "seeded\n")
        self.assertEqual([(m.op, m.path) for m in delta.fs_mutations], [("create", os.path.join(self.dir, "users.csv"))])
        self.assertFalse(os.path.exists("users.csv"))


if __name__ == "__main__":
    unittest.main()
