"""The agent loop: a model proposes a shell command, dryexec trials it, the
decision and a compact delta go back to the model, which corrects itself or
stops; changes are committed when the decision allows (docs/agent.md).

    result = await Agent(task="…").run()      # or Agent(task="…").run_sync()
    result.success, result.trials_conducted, result.committed, result.transcript
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Union

from ._errors import BadRequest, DryExecError
from ._models import Backend, ModelConfig, ModelError, ModelNotConfigured, Reply, ToolCall, backend
from ._types import Decision, Environment, Receipt, StateDelta

#: What the loop may do with a trial's changes: "auto" commits auto_commit
#: decisions (and review ones the approve callback accepts), "approve" asks
#: the approve callback for every commit, "never" only runs trials.
COMMIT_MODES = ("auto", "approve", "never")

SYSTEM_PROMPT = """You are an operator that carries out a task on a Linux host through dryexec.
You act only through tools. run_trial runs ONE shell command (/bin/sh -c) in an ephemeral trial: a
copy-on-write view of the host, no network. You get back what it did: exit code, output tails,
the files it would change, network attempts, and dryexec's decision (auto_commit, review or block)
with its reasons. {commit_rule}
When a trial fails or is blocked, read why and propose a corrected command. Keep commands small
and idempotent. When the task is done (or cannot be done), call finish with success and a short
summary. Do not call finish before the changes you wanted are committed."""

COMMIT_RULES = {
    "auto": "Changes of a trial decided auto_commit are committed to the host right away; review and "
            "block decisions are not (review may be approved by the caller).",
    "approve": "A trial's changes are committed only when the caller approves them; a block never is.",
    "never": "Nothing is committed to the host in this run: trials only show what would happen.",
}

TOOLS: List[Dict[str, Any]] = [
    {"name": "run_trial",
     "description": "Run one shell command in an ephemeral dryexec trial and get its StateDelta summary.",
     "schema": {"type": "object", "properties": {
         "command": {"type": "string", "description": "the shell command, run with /bin/sh -c"},
         "reason": {"type": "string", "description": "why this command, in one line"}},
         "required": ["command"]}},
    {"name": "finish",
     "description": "End the task: success true if it is done, false if it cannot be done.",
     "schema": {"type": "object", "properties": {
         "success": {"type": "boolean"}, "summary": {"type": "string"}},
         "required": ["success"]}},
]


@dataclass
class AgentStep:
    """One step of the transcript. ``kind`` is "trial", "finish", "answer"
    (a final answer without a tool call), "malformed" (a tool call the loop
    could not use), "refusal" or "error"."""

    index: int
    kind: str
    command: Optional[str] = None
    reason: str = ""
    trial_id: str = ""
    decision: Optional[Decision] = None
    receipt: Optional[Receipt] = None
    exit_code: Optional[int] = None
    files_changed: int = 0
    committed: bool = False
    commit_error: Optional[str] = None
    error: Optional[str] = None
    #: The model's text with this step (a final answer, a refusal, a summary).
    text: str = ""
    delta: Optional[StateDelta] = field(default=None, repr=False, compare=False)


@dataclass
class AgentResult:
    """What an agent run did. ``success``: the model ended the task as done
    and its last trial left nothing failed, blocked or uncommitted;
    ``trials_conducted``: trials run; ``committed``: some trial's changes were
    committed to the host. ``stop_reason`` is "done", "gave_up", "refused",
    "max_trials", "max_tokens", "timeout", "malformed" (too many unusable
    tool calls in a row), "model_timeout", "model_error" or "trial_error"
    (``error`` says what)."""

    success: bool = False
    trials_conducted: int = 0
    committed: bool = False
    stop_reason: str = ""
    summary: str = ""
    steps: List[AgentStep] = field(default_factory=list)
    tokens_used: int = 0
    duration_s: float = 0.0
    error: Optional[str] = None

    @property
    def transcript(self) -> List[AgentStep]:
        """Every step: trial id, decision and receipt of each trial."""
        return self.steps

    @property
    def committed_trials(self) -> List[str]:
        return [s.trial_id for s in self.steps if s.committed]


class Agent:
    """The agent loop (docs/agent.md). ``model``: a ModelConfig, a Backend,
    or None for the environment's configuration (ModelNotConfigured says
    what to set). Bounded by ``max_trials``, ``max_tokens`` (as the endpoint
    reports them, else estimated) and ``timeout`` seconds in all.

    ``commit``: "auto" (default) commits auto_commit trials, "approve" asks
    ``approve(delta) -> bool`` for each trial with changes (a block is never
    offered), "never" commits nothing. With "auto", ``approve`` (if given) is
    asked about review decisions. ``on_step(step)`` sees each step as it
    happens."""

    def __init__(self, task: str, *, model: Union[ModelConfig, Backend, None] = None, client: Any = None,
                 environment: Optional[Environment] = None, cwd: Optional[str] = None, max_trials: int = 8,
                 max_tokens: int = 200_000, timeout: float = 600.0, trial_timeout: float = 120.0,
                 commit: str = "auto", approve: Optional[Callable[[StateDelta], bool]] = None,
                 on_step: Optional[Callable[[AgentStep], None]] = None, system_prompt: Optional[str] = None,
                 max_malformed: int = 3) -> None:
        if not isinstance(task, str) or not task.strip():
            raise BadRequest("Agent: task must be a non-empty string")
        if commit not in COMMIT_MODES:
            raise BadRequest("Agent: commit=%r: want one of %s" % (commit, ", ".join(COMMIT_MODES)))
        if commit == "approve" and approve is None:
            raise BadRequest("Agent: commit='approve' needs an approve(delta) -> bool callback")
        for name, v in (("max_trials", max_trials), ("max_tokens", max_tokens), ("timeout", timeout),
                        ("trial_timeout", trial_timeout), ("max_malformed", max_malformed)):
            if not v > 0:
                raise BadRequest("Agent: %s must be positive, not %r" % (name, v))
        self.task = task
        self.model = model
        self.client = client
        self.environment = environment
        self.cwd = os.path.abspath(cwd or os.getcwd())
        self.max_trials = max_trials
        self.max_tokens = max_tokens
        self.timeout = timeout
        self.trial_timeout = trial_timeout
        self.commit = commit
        self.approve = approve
        self.on_step = on_step
        self.system_prompt = system_prompt
        self.max_malformed = max_malformed

    async def run(self) -> AgentResult:
        """Runs the loop (in a worker thread: the event loop never blocks)."""
        return await asyncio.get_running_loop().run_in_executor(None, self.run_sync)

    def run_sync(self) -> AgentResult:
        """The synchronous twin of run()."""
        be = self._backend()  # ModelNotConfigured before anything runs
        return _Loop(self, be).run()

    def _backend(self) -> Backend:
        if isinstance(self.model, Backend):
            return self.model
        if isinstance(self.model, ModelConfig):
            return backend(self.model)
        if self.model is not None:
            raise ModelNotConfigured("Agent: model=%r: want a ModelConfig, a Backend, or None (the environment)"
                                     % (self.model,))
        return backend(ModelConfig.from_env())

    def _client(self) -> Any:
        c = self.client
        if c is None:
            from ._client import default_client
            return default_client()
        return getattr(c, "sync", c)  # a DryExecClient's synchronous client


def _tail(s: str, n: int) -> str:
    return s if len(s) <= n else "…" + s[-n:]


def delta_summary(d: StateDelta, committed: bool = False, commit_error: Optional[str] = None,
                  note: str = "") -> Dict[str, Any]:
    """The compact view of a delta the model gets back."""
    out: Dict[str, Any] = {
        "trial_id": d.trial_id, "exit_code": d.exit_code, "timed_out": d.timed_out,
        "stdout": _tail(d.stdout, 2000), "stderr": _tail(d.stderr, 2000),
        "files": [{"op": f.op, "path": f.path, "size": f.size} for f in d.files[:40]],
        "network": [{"method": n.method, "url": n.url or n.host, "status": n.status, "action": n.action,
                     **({"schema_breach": True} if n.schema_breach else {})} for n in d.network[:20]],
        "violations": [{"kind": v.kind, "detail": v.detail} for v in d.violations[:10]],
        "decision": {"choice": d.decision.choice, "risk_score": d.decision.risk_score,
                     "reasons": d.decision.reasons[:10]},
        "committed": committed,
    }
    if len(d.files) > 40:
        out["files_not_shown"] = len(d.files) - 40
    if commit_error:
        out["commit_error"] = commit_error
    if note:
        out["note"] = note
    return out


class _Loop:
    def __init__(self, a: Agent, be: Backend) -> None:
        self.a = a
        self.be = be
        self.res = AgentResult()
        self.messages: List[Dict[str, Any]] = []
        self.start = time.monotonic()
        self.deadline = self.start + a.timeout
        self.malformed = 0
        self.last_trial: Optional[AgentStep] = None

    def step(self, s: AgentStep) -> AgentStep:
        self.res.steps.append(s)
        if self.a.on_step is not None:
            self.a.on_step(s)
        return s

    def stop(self, reason: str, error: Optional[str] = None) -> AgentResult:
        self.res.stop_reason = reason
        if error:
            self.res.error = error
            self.step(AgentStep(len(self.res.steps), "error", error=error))
        self.res.duration_s = time.monotonic() - self.start
        return self.res

    def good_end(self) -> bool:
        t = self.last_trial
        if t is None:
            return True
        if t.exit_code != 0 or t.error or (t.decision and t.decision.choice == "block"):
            return False
        return t.committed or t.files_changed == 0 or self.a.commit == "never"

    def run(self) -> AgentResult:
        a = self.a
        system = a.system_prompt or SYSTEM_PROMPT.format(commit_rule=COMMIT_RULES[a.commit])
        self.messages.append({"role": "user", "text": "Task: %s\nWorking directory: %s\nYou may run up to %d trials."
                              % (a.task, a.cwd, a.max_trials)})
        while True:
            left = self.deadline - time.monotonic()
            if left <= 0:
                return self.stop("timeout", "the agent ran out of time (%gs)" % a.timeout)
            if self.res.tokens_used >= a.max_tokens:
                return self.stop("max_tokens", "the agent used %d tokens of %d" % (self.res.tokens_used, a.max_tokens))
            try:
                # A request gets what is left of the run's time, at most.
                reply = self.be.complete(system, self.messages, TOOLS, timeout=left)
            except ModelError as e:
                return self.stop("model_timeout" if e.kind == "timeout" else "model_error", str(e))
            self.res.tokens_used += max(0, int(reply.tokens))
            if reply.refusal:
                self.step(AgentStep(len(self.res.steps), "refusal", text=reply.refusal))
                self.res.summary = reply.refusal
                return self.stop("refused")
            self.messages.append({"role": "assistant", "text": reply.text, "tool_calls": reply.tool_calls})
            if not reply.tool_calls:
                if reply.stop_reason in ("length", "max_tokens"):
                    return self.stop("model_error", "the model's answer was cut off (%s) without a tool call"
                                     % reply.stop_reason)
                self.step(AgentStep(len(self.res.steps), "answer", text=reply.text))
                self.res.summary = reply.text
                self.res.success = self.good_end()
                return self.stop("done")
            ended = self.calls(reply)
            if ended is not None:
                return ended
            if self.malformed >= a.max_malformed:
                return self.stop("malformed", "%d unusable tool calls in a row" % self.malformed)

    def reply_tool(self, call: ToolCall, payload: Any, is_error: bool = False) -> None:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        self.messages.append({"role": "tool", "id": call.id, "text": text, "is_error": is_error})

    def malformed_call(self, call: ToolCall, why: str) -> None:
        self.malformed += 1
        self.step(AgentStep(len(self.res.steps), "malformed", error=why, text=call.arguments[:500]))
        self.reply_tool(call, {"error": why + "; call run_trial with {\"command\": \"...\"} or finish with "
                                              "{\"success\": true|false, \"summary\": \"...\"}"}, True)

    def calls(self, reply: Reply) -> Optional[AgentResult]:
        for call in reply.tool_calls:
            try:
                args = json.loads(call.arguments) if call.arguments.strip() else {}
            except ValueError as e:
                self.malformed_call(call, "the arguments of %s are not JSON (%s)" % (call.name or "the call", e))
                continue
            if not isinstance(args, dict):
                self.malformed_call(call, "the arguments of %s are not a JSON object" % call.name)
                continue
            if call.name == "finish":
                ok = args.get("success")
                if not isinstance(ok, bool):
                    self.malformed_call(call, "finish needs success: true or false")
                    continue
                summary = str(args.get("summary") or reply.text or "")
                self.step(AgentStep(len(self.res.steps), "finish", text=summary))
                self.res.summary = summary
                self.res.success = ok and self.good_end()
                return self.stop("done" if ok else "gave_up")
            if call.name != "run_trial":
                self.malformed_call(call, "there is no tool %r (the tools are run_trial and finish)" % call.name)
                continue
            cmd = args.get("command")
            if isinstance(cmd, list) and cmd and all(isinstance(x, str) for x in cmd):
                cmd = " ".join(_shquote(x) for x in cmd)
            if not isinstance(cmd, str) or not cmd.strip():
                self.malformed_call(call, "run_trial needs command: a non-empty shell command string")
                continue
            if self.res.trials_conducted >= self.a.max_trials:
                self.reply_tool(call, {"error": "the trial budget is spent"}, True)
                return self.stop("max_trials", "the model asked for more than %d trials" % self.a.max_trials)
            self.malformed = 0
            ended = self.trial(call, cmd, str(args.get("reason") or ""))
            if ended is not None:
                return ended
        return None

    def trial(self, call: ToolCall, cmd: str, reason: str) -> Optional[AgentResult]:
        a = self.a
        left = self.deadline - time.monotonic()
        if left <= 1:
            return self.stop("timeout", "the agent ran out of time (%gs)" % a.timeout)
        s = AgentStep(len(self.res.steps), "trial", command=cmd, reason=reason)
        try:
            d = a._client().run(cmd, cwd=a.cwd, timeout=min(a.trial_timeout, left), environment=a.environment)
        except BadRequest as e:
            # The command itself was refused (a NUL byte, …): the model's to fix.
            s.error = str(e)
            self.step(s)
            self.malformed += 1
            self.reply_tool(call, {"error": "dryexec refused the command: %s" % e}, True)
            return None
        except DryExecError as e:
            s.error = str(e)
            self.step(s)
            return self.stop("trial_error", "the trial could not run: %s" % e)
        self.res.trials_conducted += 1
        s.trial_id, s.decision, s.receipt, s.exit_code = d.trial_id, d.decision, d.receipt, d.exit_code
        s.files_changed, s.delta = len(d.files), d
        if d.timed_out:
            s.exit_code = s.exit_code or -1
        if self.should_commit(d):
            try:
                d.commit(force=False)
                s.committed = True
                self.res.committed = True
            except DryExecError as e:
                s.commit_error = "%s: %s" % (e.code, e)
        self.last_trial = self.step(s)
        note = ""
        if self.res.trials_conducted >= a.max_trials:
            note = "that was the last trial this run allows: call finish now"
        self.reply_tool(call, delta_summary(d, s.committed, s.commit_error, note))
        return None

    def should_commit(self, d: StateDelta) -> bool:
        a = self.a
        if not d.files or d.decision.choice == "block" or a.commit == "never":
            return False
        if d.exit_code != 0 or d.timed_out or d.process.signal:
            return False
        if a.commit == "auto" and d.decision.choice == "auto_commit":
            return True
        if a.approve is not None and (a.commit == "approve" or d.decision.choice == "review"):
            return bool(a.approve(d))
        return False


def _shquote(s: str) -> str:
    import shlex
    return shlex.quote(s)


__all__ = ["Agent", "AgentResult", "AgentStep", "COMMIT_MODES", "ModelConfig", "ModelError", "ModelNotConfigured",
           "delta_summary"]
