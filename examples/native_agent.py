"""The self-correcting agent loop: propose -> dry-run -> evaluate -> self-correct -> commit.

    python3 examples/native_agent.py

A tiny project whose test fails. The agent runs the tests in a trial (they
fail: the decision is review, nothing is committed), reads the failure,
proposes a fix that is tested in the same trial, and that trial — passing
tests, changes inside the project only — is auto_commit and committed. Every
step's trial id, decision and signed receipt is in the transcript.
"""

import asyncio

import _support
from dry_exec import Agent
from dry_exec.testing import call

_support.scratch("native-agent")
open("calc.py", "w").write("def add(a, b):\n    return a - b\n")
open("test_calc.py", "w").write("import unittest\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n"
                                "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n")

TESTS = "PYTHONDONTWRITEBYTECODE=1 python3 -m unittest -q"


def fix(req):
    # The scripted model reads what the loop told it about the failed trial.
    r = req.last_result()
    assert r["decision"]["choice"] == "review" and "AssertionError: -1 != 5" in r["stderr"], r
    return call("run_trial", command="sed -i 's/a - b/a + b/' calc.py && " + TESTS,
                reason="add() subtracts; fix it and rerun the tests in the same trial")


script = [call("run_trial", command=TESTS, reason="see what fails"), fix,
          call("finish", success=True, summary="add() fixed; the tests pass")]


async def main():
    agent = Agent(task="Make the test suite pass", on_step=lambda s: print("  step:", s.kind, s.command or s.text))
    result = await agent.run()
    print(f"Success: {result.success}, Trials: {result.trials_conducted}, Committed: {result.committed}")
    return result


with _support.model(script) as scripted:
    result = asyncio.run(main())

print("transcript:")
_support.show_steps(result)
for s in result.transcript:
    if s.kind == "trial":
        print("  receipt of %s: sha256 %s…, signed by %s" % (s.trial_id, s.receipt.delta_sha256[:16], s.receipt.key_id))
print("calc.py on the host now:", open("calc.py").read().splitlines()[1].strip())
if scripted:  # what the script does; a real model's run may differ
    assert result.success and result.committed and "a + b" in open("calc.py").read()
