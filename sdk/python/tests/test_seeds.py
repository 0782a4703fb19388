"""The seed's three snippets, verbatim (only their print output is captured)."""

import asyncio
import contextlib
import io
import os
import re
import tempfile
import unittest
from unittest import mock

from . import _env

_env.setup()

import dry_exec  # noqa: E402
from dry_exec.testing import ScriptedModel, call  # noqa: E402


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

    def test_agent_loop(self) -> None:
        # The model is a scripted server on loopback, configured as a user
        # would configure theirs: through the environment.
        with open("old.tmp", "w") as f:
            f.write("stale\n")
        script = [call("run_trial", command="printf 'id,name\\n1,ada\\n' > users_v2.csv", reason="migrate"),
                  call("finish", success=True, summary="users migrated")]
        out = io.StringIO()
        with ScriptedModel(script) as m, mock.patch.dict(os.environ, m.env()), contextlib.redirect_stdout(out):
            # ---- snippet 1, verbatim
            import asyncio
            from dry_exec import Agent

            async def main():
                agent = Agent(task="Clean up old temp files and migrate user records")
                result = await agent.run()

                print(f"Success: {result.success}, Trials: {result.trials_conducted}, Committed: {result.committed}")

            asyncio.run(main())
        self.assertEqual(out.getvalue(), "Success: True, Trials: 1, Committed: True\n")
        with open("users_v2.csv") as f:
            self.assertEqual(f.read(), "id,name\n1,ada\n")
        self.assertIn("Clean up old temp files", m.requests[0].body["messages"][1]["content"])

    def test_agent_loop_without_a_model(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "DRYEXEC_OPENAI",
                                                                        "DRYEXEC_ANTHROPIC", "DRYEXEC_AGENT"))}
        with mock.patch.dict(os.environ, env, clear=True):
            from dry_exec import Agent

            async def main():
                agent = Agent(task="Clean up old temp files and migrate user records")
                await agent.run()

            with self.assertRaisesRegex(dry_exec.ModelNotConfigured, "OPENAI_BASE_URL.*ANTHROPIC_API_KEY"):
                asyncio.run(main())

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
        with contextlib.redirect_stdout(out), self.assertWarnsRegex(dry_exec.TrialFunctionWarning,
                                                                    "NameError: name 'db' is not defined"):
            delta = update_balance("acc_101", 500)
            print(f"{delta.total_bytes_mutated} bytes mutated in {delta.duration_nanos}ns")
        # File bytes (none) plus the memory the interpreter dirtied.
        self.assertRegex(out.getvalue(), r"^[1-9][0-9]* bytes mutated in [1-9][0-9]*ns\n$")
        self.assertEqual(delta.total_bytes_mutated, delta.memory.bytes_written)
        self.assertEqual(delta.totals.bytes_written, 0)
        # `db` exists only in the caller's imagination: the trial says so,
        # in a way the caller cannot take for a success.
        self.assertEqual(delta.error, "NameError: name 'db' is not defined")
        self.assertFalse(delta.ok)
        self.assertEqual(delta.exit_code, 1)
        self.assertNotEqual(delta.decision.choice, "auto_commit")
        with self.assertRaises(dry_exec.TrialFunctionError) as cm:
            delta.return_value
        self.assertEqual((cm.exception.type, cm.exception.exc_message), ("NameError", "name 'db' is not defined"))
        # The traceback points at the function's own file and line.
        line = update_balance.__wrapped__.__code__.co_firstlineno + 3  # the decorator, def, comment
        self.assertIn('test_seeds.py", line %d, in update_balance' % line, cm.exception.traceback)

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
