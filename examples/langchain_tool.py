"""LangChain tools that wrap dry_exec: an agent built with LangChain proposes
shell commands through `dry_exec_trial`, reads the StateDelta summary, and
commits through `dry_exec_commit` only what it (or you) decided to keep.

    python3 examples/langchain_tool.py

Written against LangChain's documented tool interface (`langchain_core.tools.tool`);
give the tools to any LangChain agent: `create_react_agent(llm, [dry_exec_trial,
dry_exec_commit])`. Where LangChain is not installed, a minimal stand-in of
that interface (_langchain_standin.py) runs the same code, and this script
calls the tools as an agent would.
"""

import json
import os

import _support
import dry_exec

try:
    from langchain_core.tools import tool
    USING = "langchain_core"
except ImportError:
    from _langchain_standin import tool
    USING = "a minimal stand-in of langchain_core.tools.tool (LangChain is not installed)"


@tool
def dry_exec_trial(command: str) -> str:
    """Run a shell command in an ephemeral dryexec trial: nothing on the host
    changes. Returns JSON: trial_id, exit_code, stdout, stderr, the files it
    would change, its network requests, and the decision (auto_commit, review,
    block) with reasons. Commit it with dry_exec_commit if you want it."""
    d = dry_exec.run(command)
    return json.dumps({
        "trial_id": d.trial_id, "exit_code": d.exit_code, "stdout": d.stdout[-2000:], "stderr": d.stderr[-2000:],
        "files": [{"op": f.op, "path": f.path, "size": f.size} for f in d.files[:50]],
        "network": [{"method": n.method, "url": n.url, "status": n.status, "action": n.action} for n in d.network
                    if n.proto != "dns"],
        "decision": {"choice": d.decision.choice, "risk_score": d.decision.risk_score, "reasons": d.decision.reasons},
    })


@tool
def dry_exec_commit(trial_id: str) -> str:
    """Apply a trial's file changes to the host. Refused for a trial the
    policy blocked, or when the host changed since the trial."""
    try:
        applied = dry_exec.default_client().commit(trial_id)
    except dry_exec.DryExecError as e:
        return json.dumps({"committed": False, "error": "%s: %s" % (e.code, e)})
    return json.dumps({"committed": True, "files": [f.path for f in applied]})


if __name__ == "__main__":
    _support.scratch("langchain")
    print("tools from", USING)
    for t in (dry_exec_trial, dry_exec_commit):
        print("  %s(%s): %s" % (t.name, ", ".join(t.args), t.description.splitlines()[0]))

    # What a LangChain agent does with them: try, read, decide, commit.
    out = json.loads(dry_exec_trial.invoke({"command": "echo '# notes' > NOTES.md && rm -f NOTES.md.bak"}))
    print("trial:", out["trial_id"], out["decision"]["choice"], [(f["op"], os.path.basename(f["path"])) for f in out["files"]])
    assert not os.path.exists("NOTES.md")
    if out["decision"]["choice"] == "auto_commit":
        print("commit:", dry_exec_commit.invoke({"trial_id": out["trial_id"]}))
    assert open("NOTES.md").read() == "# notes\n"

    out = json.loads(dry_exec_trial.invoke("mkdir -p .ssh && echo key > .ssh/authorized_keys"))
    print("trial:", out["trial_id"], out["decision"]["choice"], "-", out["decision"]["reasons"][0])
    print("commit:", dry_exec_commit.invoke({"trial_id": out["trial_id"]}))
    assert out["decision"]["choice"] == "block" and not os.path.exists(".ssh")
