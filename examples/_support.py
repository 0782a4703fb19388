"""Shared set-up of the examples (not part of the SDK): find the SDK and the
dryexec binary in this repository when they are not installed, give each
example a scratch directory, and choose the model of the agent examples.

Model: the one your environment configures (OPENAI_BASE_URL / OPENAI_API_KEY
/ ANTHROPIC_API_KEY …, docs/agent.md), else — or always with
DRYEXEC_EXAMPLES_OFFLINE=1, as `make examples` runs them — a scripted model
server on loopback (dry_exec.testing.ScriptedModel) that plays the model's
part deterministically, with no network.
"""

import contextlib
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

try:
    import dry_exec  # noqa: F401  (installed: pip install ./sdk/python)
except ImportError:
    sys.path.insert(0, os.path.join(REPO, "sdk", "python"))

# The daemon the SDK starts: dryexec on PATH, else this repository's build.
if not os.environ.get("DRYEXEC_BIN") and not shutil.which("dryexec"):
    built = os.path.join(REPO, "bin", "dryexec")
    if os.path.exists(built):
        os.environ["DRYEXEC_BIN"] = built

import dry_exec  # noqa: E402
from dry_exec.testing import ScriptedModel  # noqa: E402


def scratch(name: str) -> str:
    """A fresh directory to work in (the examples change files there only)."""
    d = tempfile.mkdtemp(prefix="dryexec-%s-" % name)
    os.chdir(d)
    return d


def model_configured() -> bool:
    if os.environ.get("DRYEXEC_EXAMPLES_OFFLINE") == "1":
        return False
    try:
        dry_exec.ModelConfig.from_env()
        return True
    except dry_exec.ModelNotConfigured:
        return False


@contextlib.contextmanager
def model(script):
    """Your model if one is configured, else the scripted one (script: the
    turns of dry_exec.testing.ScriptedModel)."""
    if model_configured():
        yield None
        return
    print("(no model configured: a scripted model on loopback plays its part; "
          "set OPENAI_BASE_URL or ANTHROPIC_API_KEY to use yours)")
    saved = {k: os.environ.get(k) for k in ("DRYEXEC_AGENT_PROVIDER", "OPENAI_BASE_URL", "OPENAI_API_KEY",
                                            "OPENAI_MODEL", "DRYEXEC_OPENAI_BASE_URL", "DRYEXEC_OPENAI_API_KEY",
                                            "DRYEXEC_OPENAI_MODEL", "DRYEXEC_MODEL")}
    with ScriptedModel(script) as m:
        for k in saved:
            os.environ.pop(k, None)
        os.environ.update(m.env())
        try:
            yield m
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def show_steps(result) -> None:
    for s in result.transcript:
        if s.kind == "trial":
            print("  [%d] $ %s\n      -> %s (risk %.2f), trial %s, exit %s%s" % (
                s.index + 1, s.command, s.decision.choice, s.decision.risk_score, s.trial_id, s.exit_code,
                ", committed" if s.committed else ""))
        else:
            print("  [%d] %s: %s" % (s.index + 1, s.kind, s.text or s.error))
