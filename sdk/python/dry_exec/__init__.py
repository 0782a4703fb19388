"""dry_exec: the Python SDK of dryexec.

Every action runs as an ephemeral trial behind a real isolation boundary and
comes back as a typed StateDelta; nothing on the host changes until you commit.
The SDK talks to `dryexec serve` (found on its socket, or started privately and
stopped at exit) and uses the standard library only.

    import dry_exec
    delta = dry_exec.run("python seed_data.py")
    delta.fs_mutations; delta.decision.choice; delta.commit()

    with dry_exec.session(rung="ns") as s:
        s.shell("echo hi > a.txt"); s.diff().writes

    result = await dry_exec.Agent(task="…").run()   # a model proposes, trials decide
"""

from ._agent import Agent, AgentResult, AgentStep
from ._client import Client, DryExecClient, compare, default_client, run
from ._dryrun import FunctionDelta, TrialFunctionError, TrialFunctionWarning, dry_run
from ._models import ModelConfig, ModelError, ModelNotConfigured
from ._errors import (AlreadyDone, BadRequest, Blocked, Busy, CommitConflict, Corrupt, DaemonUnavailable, DryExecError,
                      ImageCommit, ImageUnavailable, IsolationUnavailable, NoSpace, NotFound, NotRepresentable, PolicyError, SessionLost, Unauthorized,
                      Uncommittable, Unverified)
from ._session import AsyncSession, Pickled, Session, SessionCache, session
from ._types import (Action, ActionRecord, Decision, Diff, Environment, Event, FileChange, Memory, NetworkEvent,
                     PrintEntry, PrintObject, Process, PythonError, PythonResult, Receipt, SessionInfo, ShellResult, StateDelta,
                     Totals, Violation)

__version__ = "0.1.0"

__all__ = [
    "Agent", "AgentResult", "AgentStep", "FunctionDelta", "ModelConfig", "ModelError", "ModelNotConfigured",
    "TrialFunctionError", "TrialFunctionWarning",
    "Action", "ActionRecord", "AlreadyDone", "AsyncSession", "BadRequest", "Blocked", "Busy", "Client", "CommitConflict",
    "Corrupt", "DaemonUnavailable", "Decision", "Diff", "DryExecClient", "DryExecError", "Environment", "Event", "FileChange",
    "ImageCommit", "ImageUnavailable", "IsolationUnavailable", "Memory", "NetworkEvent", "NoSpace", "NotFound", "NotRepresentable", "Pickled", "PolicyError", "PrintEntry", "PrintObject",
    "Process", "PythonError", "PythonResult", "Receipt", "Session", "SessionCache", "SessionInfo", "SessionLost",
    "ShellResult", "StateDelta", "Totals", "Unauthorized", "Uncommittable", "Unverified", "Violation", "compare", "default_client", "dry_run", "run", "session",
]
