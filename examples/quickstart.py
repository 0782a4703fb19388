"""Quickstart: the SDK's three paths, then dry_exec.run().

    python3 examples/quickstart.py

1. the agent loop (a model proposes, trials decide, auto_commit commits);
2. a direct ephemeral trial of one action;
3. the @dry_exec.dry_run decorator, on the description's own example (whose
   `db` is never defined: the NameError comes back on the delta) and on one
   that works.
"""

import os
import shutil
import sqlite3

import _support
from dry_exec.testing import call

work = _support.scratch("quickstart")
os.makedirs("cache", exist_ok=True)
for name in ("cache/a.tmp", "cache/b.tmp"):
    open(name, "w").write("stale\n")
open("users.csv", "w").write("id,name\n1,ada\n2,grace\n")

print("== Path 1: the agent loop")


def after_cleanup(req):
    # What a model would do when told the delete needs a person: leave that
    # trial for review and do the part it may do on its own.
    r = req.last_result()
    assert r["decision"]["choice"] == "review", r
    return call("run_trial", command="awk -F, 'NR==1{print $0\",active\"} NR>1{print $0\",1\"}' users.csv > users_v2.csv",
                reason="migrate the user records to v2")


script = [call("run_trial", command="find cache -name '*.tmp' -delete && "
                                    "awk -F, 'NR==1{print $0\",active\"} NR>1{print $0\",1\"}' users.csv > users_v2.csv",
               reason="clean up and migrate in one go"),
          after_cleanup,
          call("finish", success=True, summary="users migrated to users_v2.csv; deleting cache/*.tmp was sent "
                                               "to review (deletes need a person)")]

with _support.model(script) as scripted:
    # ---- the description's snippet, as is
    import asyncio
    from dry_exec import Agent

    async def main():
        agent = Agent(task="Clean up old temp files and migrate user records")
        result = await agent.run()

        print(f"Success: {result.success}, Trials: {result.trials_conducted}, Committed: {result.committed}")

    asyncio.run(main())

if scripted:  # what the script does; a real model's run may differ
    print("users_v2.csv on the host:", open("users_v2.csv").read().splitlines())
    print("cache/ still holds:", sorted(os.listdir("cache")), "(the delete was not committed)")

print("\n== Path 2: direct ephemeral client execution")
# ---- the description's snippet, as is
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
print("test.txt on the host:", os.path.exists("test.txt"), "(nothing is committed until you say so)")

print("\n== Path 3: the @dry_exec.dry_run decorator")
import warnings

import dry_exec

warnings.simplefilter("ignore", dry_exec.TrialFunctionWarning)  # shown below instead


# ---- the description's snippet, as is: `db` is defined nowhere
@dry_exec.dry_run
def update_balance(account_id: str, amount: int):
    # Runs in ephemeral sandbox; database is untouched
    db.execute("UPDATE accounts SET balance = balance + $1 WHERE id = $2", amount, account_id)  # noqa: F821

delta = update_balance("acc_101", 500)
print(f"{delta.total_bytes_mutated} bytes mutated in {delta.duration_nanos}ns")
print("but the function raised in the trial:", delta.error, "| ok:", delta.ok, "| decision:", delta.decision.choice)

# The same idea with a database that exists: the path travels with the
# function (a str global); the connection is made inside the trial.
DB = os.path.join(work, "bank.db")
with sqlite3.connect(DB) as c:
    c.execute("CREATE TABLE accounts (id TEXT PRIMARY KEY, balance INTEGER)")
    c.execute("INSERT INTO accounts VALUES ('acc_101', 1000)")


@dry_exec.dry_run
def update_balance_sqlite(account_id: str, amount: int):
    db = sqlite3.connect(DB)
    db.execute("UPDATE accounts SET balance = balance + ? WHERE id = ?", (amount, account_id))
    db.commit()
    return db.execute("SELECT balance FROM accounts WHERE id = ?", (account_id,)).fetchone()[0]


delta = update_balance_sqlite("acc_101", 500)
host = sqlite3.connect(DB).execute("SELECT balance FROM accounts").fetchone()[0]
print(f"in the trial the balance became {delta.return_value}; on the host it is still {host}")
print(f"{delta.total_bytes_mutated} bytes mutated ({delta.totals.bytes_written} in files, "
      f"{delta.memory.bytes_written} in memory), files: {[(m.op, os.path.basename(m.path)) for m in delta.fs_mutations]}")
delta.commit()
print("after delta.commit():", sqlite3.connect(DB).execute("SELECT balance FROM accounts").fetchone()[0])

print("\n== dry_exec.run()")
open("seed_data.py", "w").write("open('seed.csv', 'w').write('id\\n1\\n')\nprint('seeded')\n")
python = "python" if shutil.which("python") else "python3"
delta = dry_exec.run(f"{python} seed_data.py")
print(delta.stdout.strip(), "->", [(m.op, os.path.basename(m.path)) for m in delta.fs_mutations],
      "| decision:", delta.decision.choice)
