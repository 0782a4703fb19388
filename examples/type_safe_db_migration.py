"""A SQLite migration that breaks the schema check is caught in the trial,
fixed, then committed.

    python3 examples/type_safe_db_migration.py

users.db holds three users. The task: add a `status` column. Every proposed
migration runs in a trial together with check_schema.py (the schema the
application expects, and no lost rows); the environment lets the trial change
users.db and nothing else. The first migration rebuilds the table and drops
`email`: the check fails inside the trial, the decision is review, the host
database is untouched. The corrected migration passes the check, is
auto_commit, and is committed.
"""

import asyncio
import os
import sqlite3

import _support
from dry_exec import Agent, Environment
from dry_exec.testing import call

work = _support.scratch("db-migration")
db = sqlite3.connect("users.db")
db.executescript("""
CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT NOT NULL UNIQUE);
INSERT INTO users (name, email) VALUES ('ada', 'ada@example.com'), ('grace', 'grace@example.com'),
                                       ('edsger', 'edsger@example.com');
""")
db.close()

open("migrate.py", "w").write('''import sqlite3, sys
db = sqlite3.connect("users.db")
with db:  # one transaction: all of the migration or none of it
    db.executescript(sys.argv[1])
print("migrated")
''')
open("check_schema.py", "w").write('''import sqlite3, sys
db = sqlite3.connect("users.db")
cols = {r[1]: (r[2], bool(r[3])) for r in db.execute("PRAGMA table_info(users)")}
want = {"id": ("INTEGER", False), "name": ("TEXT", True), "email": ("TEXT", True), "status": ("TEXT", True)}
problems = ["column %s: want %s, have %s" % (c, w, cols.get(c)) for c, w in want.items() if cols.get(c) != w]
n = db.execute("SELECT count(*) FROM users").fetchone()[0]
if n != 3:
    problems.append("%d rows, want 3" % n)
if problems:
    sys.exit("schema check failed: " + "; ".join(problems))
print("schema check passed")
''')

BROKEN = ("CREATE TABLE users_new (id INTEGER PRIMARY KEY, name TEXT NOT NULL, status TEXT NOT NULL); "
          "INSERT INTO users_new SELECT id, name, 'active' FROM users; DROP TABLE users; "
          "ALTER TABLE users_new RENAME TO users;")
FIXED = "ALTER TABLE users ADD COLUMN status TEXT NOT NULL DEFAULT 'active';"


def migration(sql):
    return "python3 migrate.py \"%s\" && python3 check_schema.py" % sql


def after_failure(req):
    r = req.last_result()
    assert r["decision"]["choice"] == "review" and "email" in r["stderr"], r
    return call("run_trial", command=migration(FIXED), reason="keep every column: ALTER TABLE ADD COLUMN with a default")


script = [call("run_trial", command=migration(BROKEN), reason="rebuild users with a status column"),
          after_failure,
          call("finish", success=True, summary="status added; the schema check passes")]

env = Environment(name="migration", allowed_mutation_targets={os.path.join(work, "users.db")})
with _support.model(script) as scripted:
    result = asyncio.run(Agent(task="Add a NOT NULL `status` column (default 'active') to the users table "
                                    "in users.db; run check_schema.py after the migration in the same trial",
                               environment=env).run())

print(f"Success: {result.success}, Trials: {result.trials_conducted}, Committed: {result.committed}")
_support.show_steps(result)
first = next((s for s in result.transcript if s.kind == "trial"), None)
if first is not None:
    print("what the check said about the first migration:", first.delta.stderr.strip() or "(nothing)")
cols = [r[1] for r in sqlite3.connect("users.db").execute("PRAGMA table_info(users)")]
rows = sqlite3.connect("users.db").execute("SELECT name, email, status FROM users ORDER BY id").fetchall()
print("users.db on the host:", cols, rows)
if scripted:  # what the script does; a real model's run may differ
    assert result.success and cols == ["id", "name", "email", "status"] and len(rows) == 3
