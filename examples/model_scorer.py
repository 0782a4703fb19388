#!/usr/bin/env python3
"""A model-based risk scorer for dryexec's external scorer (docs/decision.md,
"External scorer"): dryexec runs it with the delta's JSON on stdin; it asks a
model how risky committing that delta is and prints {"score": N}.

    # policy.yaml
    scorer:
      command: ["python3", "/path/to/examples/model_scorer.py"]
      timeout_ms: 20000            # a model takes longer than the 2 s default

    dryexec run --policy policy.yaml -- sh -c '…'

The model is any OpenAI-compatible chat-completions endpoint, configured as
the agent's is (OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL; DRYEXEC_
names win), in the environment dryexec runs with. Standard library only.
When anything fails — no model, a timeout, an answer without a score — it
exits 1 and dryexec keeps its deterministic decision (and says so in a
`scorer:` reason). The score is blended 0.4 deterministic + 0.6 model: the
model can send an action to review, never unblock one.

    python3 examples/model_scorer.py --demo

runs two trials through `dryexec run` with this scorer, the model played by a
scripted server on loopback (offline).
"""

import json
import os
import re
import sys
import urllib.request

SYSTEM = ("You review the effects of a shell action before they are committed to a production host. "
          "Rate the risk of committing them from 0 (routine) to 1 (destructive, irreversible or a security "
          "concern). Answer with JSON only: {\"score\": <number>, \"why\": \"<one sentence>\"}.")


def summary(delta: dict) -> dict:
    """What the model sees: the action and its effects, not file contents."""
    files = delta.get("files") or []
    return {
        "command": (delta.get("action") or {}).get("argv"), "cwd": (delta.get("action") or {}).get("cwd"),
        "exit_code": (delta.get("process") or {}).get("exit_code"),
        "stdout_tail": ((delta.get("process") or {}).get("stdout") or "")[-1000:],
        "files": [{"op": f.get("op"), "path": f.get("path"), "size": f.get("size"), "diff": (f.get("diff") or "")[:800]}
                  for f in files[:40]], "files_total": len(files),
        "network": [{k: n.get(k) for k in ("method", "url", "host", "status", "action", "schema_breach")}
                    for n in (delta.get("network") or [])[:20] if n.get("proto") != "dns"],
        "violations": delta.get("violations") or [],
    }


def env(*names: str) -> str:
    for n in names:
        if os.environ.get(n):
            return os.environ[n]
    return ""


def score(delta: dict) -> float:
    base = env("DRYEXEC_OPENAI_BASE_URL", "OPENAI_BASE_URL") or "https://api.openai.com/v1"
    key = env("DRYEXEC_OPENAI_API_KEY", "OPENAI_API_KEY")
    model = env("DRYEXEC_MODEL", "DRYEXEC_OPENAI_MODEL", "OPENAI_MODEL") or "gpt-4o-mini"
    body = {"model": model, "temperature": 0, "max_tokens": 200,
            "messages": [{"role": "system", "content": SYSTEM},
                         {"role": "user", "content": json.dumps(summary(delta))}]}
    req = urllib.request.Request(base.rstrip("/") + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json",
                                          **({"Authorization": "Bearer " + key} if key else {})})
    with urllib.request.urlopen(req, timeout=15) as r:  # below the policy's timeout_ms
        answer = json.load(r)["choices"][0]["message"]["content"] or ""
    m = re.search(r"\{.*\}", answer, re.S)  # models wrap JSON in prose or fences
    s = float(json.loads(m.group(0))["score"]) if m else float(answer.strip())
    if not 0 <= s <= 1:
        raise ValueError("score %r is outside [0,1]" % s)
    return s


def main() -> int:
    try:
        s = score(json.load(sys.stdin))
    except Exception as e:  # noqa: BLE001 - any failure: dryexec's decision stands
        print("model_scorer: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 1
    print(json.dumps({"score": s}))
    return 0


def demo() -> None:
    import subprocess

    import _support
    from dry_exec.testing import ScriptedModel

    work = _support.scratch("scorer")
    open("policy.yaml", "w").write('scorer: {command: ["%s", "%s"], timeout_ms: 20000}\n'
                                   % (sys.executable, os.path.abspath(__file__)))
    binary = os.environ.get("DRYEXEC_BIN") or "dryexec"
    cases = [("a migration that drops a table", "echo 'DROP TABLE users;' > migrate.sql",
              {"text": "```json\n{\"score\": 0.92, \"why\": \"drops the users table\"}\n```"}),
             ("the model answers nonsense", "echo 'SELECT 1;' > check.sql", {"text": "I think it is fine."})]
    for title, cmd, turn in cases:
        with ScriptedModel([turn]) as m:
            e = dict(os.environ, **m.env())
            p = subprocess.run([binary, "run", "--json", "--policy", "policy.yaml", "-C", work, "--", "sh", "-c", cmd],
                               env=e, capture_output=True, text=True)
        d = json.loads(p.stdout)
        print("==", title, "\n   $", cmd)
        print("   decision: %s (risk %.2f), exit %d" % (d["decision"]["choice"], d["decision"]["risk_score"], p.returncode))
        for r in d["decision"]["reasons"]:
            if r.startswith(("scorer:", "review:")):
                print("     " + r)
        scored = any(r.startswith("scorer: external score") for r in d["decision"]["reasons"])
        assert scored == (turn["text"].startswith("```")), d["decision"]
    assert p.returncode == 0  # the failed scorer left the deterministic auto_commit


if __name__ == "__main__":
    if sys.argv[1:] == ["--demo"]:
        demo()
    else:
        sys.exit(main())
