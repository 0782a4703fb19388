"""Typed results: the StateDelta (dryexec.statedelta/v1) and session results."""

from __future__ import annotations

import base64
import dataclasses
import pathlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, FrozenSet, List, Mapping, Optional, Set, Union

if TYPE_CHECKING:  # pragma: no cover
    from ._client import Client


def _build(cls: Any, d: Optional[Mapping[str, Any]]) -> Any:
    """cls from a JSON object: known fields only, so a newer daemon's extra
    fields do not break an older SDK."""
    d = d or {}
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class Environment:
    """Where an action may act: the product description's environment, sent to the daemon as
    its policy (docs/decision.md). ``allowed_mutation_targets`` are path globs
    ("*": anywhere the default policy allows)."""

    name: str = "sandbox"
    allowed_mutation_targets: Union[Set[str], FrozenSet[str], List[str]] = field(default_factory=lambda: {"*"})
    denied_mutation_targets: Optional[List[str]] = None
    rung: str = "ns"
    timeout_ms: int = 0
    env: Dict[str, str] = field(default_factory=dict)
    #: What the network reaches, as `dryexec run --net`: ["none"] (default),
    #: ["mock:/abs/mocks.yaml"], ["allow:api.example.com"], …
    net: Optional[List[str]] = None

    def policy(self) -> Dict[str, Any]:
        p: Dict[str, Any] = {"name": self.name, "allowed_mutation_targets": sorted(self.allowed_mutation_targets)}
        if self.denied_mutation_targets is not None:
            p["denied_mutation_targets"] = list(self.denied_mutation_targets)
        return p


@dataclass
class Action:
    """A proposed action, in the product description's shape. ``target_resource`` says what
    ``payload`` holds:

    - "shell_command": payload["command"] is an argv list, or a string run
      with /bin/sh -c;
    - "python": payload["code"] is Python source run with python3 -c.

    payload may also set "cwd" (default: the current directory), "env" (a
    dict), "timeout_ms" and "stdin" (a str).
    """

    action_id: str
    target_resource: str = "shell_command"
    mutation_type: str = "execute"
    payload: Dict[str, Any] = field(default_factory=dict)


@dataclass
class ActionRecord:
    """The action as the trial ran it."""

    argv: List[str] = field(default_factory=list)
    cwd: str = ""
    env: Dict[str, str] = field(default_factory=dict)
    timeout_ms: int = 0


@dataclass
class Process:
    exit_code: int = 0
    signal: str = ""
    timed_out: bool = False
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_ns: int = 0
    cpu_user_ns: int = 0
    cpu_sys_ns: int = 0
    peak_rss_bytes: int = 0


@dataclass
class FileChange:
    path: str = ""
    op: str = ""
    kind: str = ""
    size: int = 0
    mode: str = ""
    sha256: str = ""
    before_sha256: str = ""
    link_target: str = ""
    uid: int = 0
    gid: int = 0
    before_mode: str = ""
    # The host's owner, on a change that moves it (a chmod that is a chown).
    before_uid: Optional[int] = None
    before_gid: Optional[int] = None
    diff: str = ""


@dataclass
class NetworkEvent:
    proto: str = ""
    method: str = ""
    url: str = ""
    host: str = ""
    port: int = 0
    status: int = 0
    action: str = ""
    reason: str = ""
    bytes_in: int = 0
    bytes_out: int = 0
    schema_breach: bool = False


@dataclass
class Memory:
    peak_rss_bytes: int = 0
    pages_written: int = 0
    bytes_written: int = 0
    method: str = ""


@dataclass
class Violation:
    kind: str = ""
    detail: str = ""
    pid: int = 0
    exe: str = ""


@dataclass
class Totals:
    files_changed: int = 0
    files_created: int = 0
    files_deleted: int = 0
    bytes_written: int = 0
    network_requests: int = 0


@dataclass
class Decision:
    """The policy's verdict: choice is auto_commit, review or block."""

    choice: str = ""
    risk_score: float = 0.0
    reasons: List[str] = field(default_factory=list)


@dataclass
class Receipt:
    delta_sha256: str = ""
    signature: str = ""
    key_id: str = ""


@dataclass
class StateDelta:
    """Everything one trial did, as the host would see it if committed."""

    schema: str = ""
    trial_id: str = ""
    rung: str = ""
    action: ActionRecord = field(default_factory=ActionRecord)
    process: Process = field(default_factory=Process)
    files: List[FileChange] = field(default_factory=list)
    network: List[NetworkEvent] = field(default_factory=list)
    memory: Memory = field(default_factory=Memory)
    violations: List[Violation] = field(default_factory=list)
    totals: Totals = field(default_factory=Totals)
    decision: Decision = field(default_factory=Decision)
    receipt: Receipt = field(default_factory=Receipt)
    warnings: List[str] = field(default_factory=list)
    #: Set when the trial ran on an OCI image (``run(image=...)``): its
    #: "ref", "digest" and "workspace". Its paths are the image's, and it
    #: commits only with ``to=``: docs/images.md.
    image: Optional[Dict[str, str]] = None
    #: What a @dry_run function returned (JSON-decoded), or None.
    return_value: Any = None
    #: The exception a @dry_run function raised, as "Type: message", or None.
    error: Optional[str] = None
    _client: Optional["Client"] = field(default=None, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any], client: Optional["Client"] = None) -> "StateDelta":
        return cls(
            schema=d.get("schema", ""), trial_id=d.get("trial_id", ""), rung=d.get("rung", ""),
            action=_build(ActionRecord, d.get("action")), process=_build(Process, d.get("process")),
            files=[_build(FileChange, f) for f in d.get("files") or []],
            network=[_build(NetworkEvent, n) for n in d.get("network") or []],
            memory=_build(Memory, d.get("memory")),
            violations=[_build(Violation, v) for v in d.get("violations") or []],
            totals=_build(Totals, d.get("totals")), decision=_build(Decision, d.get("decision")),
            receipt=_build(Receipt, d.get("receipt")), warnings=list(d.get("warnings") or []),
            image=dict(d["image"]) if d.get("image") else None, _client=client)

    # The product description's names.
    @property
    def fs_mutations(self) -> List[FileChange]:
        return self.files

    @property
    def total_bytes_mutated(self) -> int:
        """File bytes written (the new files' and rewritten files' sizes,
        totals.bytes_written) plus memory bytes written (the pages the
        trial's processes dirtied, memory.bytes_written)."""
        return self.totals.bytes_written + self.memory.bytes_written

    @property
    def duration_nanos(self) -> int:
        return self.process.duration_ns

    @property
    def stdout(self) -> str:
        return self.process.stdout

    @property
    def stderr(self) -> str:
        return self.process.stderr

    @property
    def exit_code(self) -> int:
        return self.process.exit_code

    @property
    def timed_out(self) -> bool:
        return self.process.timed_out

    def commit(self, paths: Optional[List[str]] = None, force: bool = False, to: Optional[str] = None) -> List[FileChange]:
        """Applies the trial's changes to the host (all, or only ``paths`` and
        what is beneath them). Raises CommitConflict if the host changed, and
        Blocked if the policy decided block; ``force=True`` says a person
        decided, over both (the override is recorded with the trial). A
        trial that ran on an image commits only with ``to``, a host
        directory that receives what it changed beneath its workspace
        (ImageCommit otherwise)."""
        return self._need_client().commit(self.trial_id, paths=paths, force=force, to=to)

    def discard(self) -> None:
        """Drops the trial without changing the host."""
        self._need_client().discard(self.trial_id)

    def _need_client(self) -> "Client":
        if self._client is None:
            from ._client import default_client
            self._client = default_client()
        return self._client


@dataclass
class ShellResult:
    exit_code: int = 0
    timed_out: bool = False
    transcript: str = ""
    stdout: str = ""
    stderr: str = ""
    truncated: bool = False
    cwd: str = ""
    warnings: List[str] = field(default_factory=list)
    duration_ns: int = 0
    #: What the session's netsim logged during this exec (ns rung).
    network: List[NetworkEvent] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ShellResult":
        r = _build(cls, {k: v for k, v in d.items() if k != "network"})
        r.network = [_build(NetworkEvent, e) for e in d.get("network") or []]
        return r


@dataclass
class PrintObject:
    """One printed object: its type, its repr() within the renderer's budget
    (ping()["renderer"]), and len() for a sized object (None otherwise)."""
    type: str = ""
    repr: str = ""
    truncated: bool = False
    len: Optional[int] = None


@dataclass
class PrintEntry:
    """One print() call; kind "echo" is the value of a final bare expression
    (as a REPL shows it), kind "dropped" marks where an exec's caps dropped
    whole entries (len: how many)."""
    type: str = ""
    len: int = 0
    text: str = ""
    truncated: bool = False
    kind: str = ""
    objects: List[PrintObject] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.objects = [o if isinstance(o, PrintObject) else _build(PrintObject, o) for o in self.objects or []]


@dataclass
class PythonError:
    type: str = ""
    message: str = ""
    traceback: str = ""


@dataclass
class PythonResult:
    ok: bool = False
    timed_out: bool = False
    transcript: str = ""
    prints: List[PrintEntry] = field(default_factory=list)
    prints_dropped: int = 0
    #: Top-level bindings, decoded: JSON values, bytes, or pathlib.PurePosixPath.
    outputs: Dict[str, Any] = field(default_factory=dict)
    outputs_skipped: Dict[str, str] = field(default_factory=dict)
    error: Optional[PythonError] = None
    duration_ns: int = 0
    #: What the session's netsim logged during this exec (ns rung).
    network: List[NetworkEvent] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "PythonResult":
        from ._codec import decode
        return cls(ok=bool(d.get("ok")), timed_out=bool(d.get("timed_out")), transcript=d.get("transcript", ""),
                   prints=[_build(PrintEntry, p) for p in d.get("prints") or []], prints_dropped=d.get("prints_dropped", 0),
                   outputs={k: decode(v) for k, v in (d.get("outputs") or {}).items()},
                   outputs_skipped=dict(d.get("outputs_skipped") or {}),
                   error=_build(PythonError, d["error"]) if d.get("error") else None, duration_ns=d.get("duration_ns", 0),
                   network=[_build(NetworkEvent, e) for e in d.get("network") or []])


@dataclass
class Diff:
    """A session's changes since its baseline; paths relative to the workspace."""

    writes: Dict[str, bytes] = field(default_factory=dict)
    deletes: List[str] = field(default_factory=list)
    modes: Dict[str, int] = field(default_factory=dict)
    links: Dict[str, str] = field(default_factory=dict)

    @property
    def paths(self) -> List[str]:
        """Every changed path once, sorted: written, linked, deleted or with a new mode."""
        return sorted(set(self.writes) | set(self.links) | set(self.deletes) | set(self.modes))

    @property
    def empty(self) -> bool:
        """True when nothing changed; a chmod alone is a change."""
        return not self.paths

    def is_empty(self) -> bool:
        return self.empty

    def __bool__(self) -> bool:
        return not self.empty

    def __len__(self) -> int:
        return len(self.paths)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Diff":
        return cls(writes={k: base64.b64decode(v) for k, v in (d.get("writes") or {}).items()},
                   deletes=list(d.get("deletes") or []), modes={k: int(v) for k, v in (d.get("modes") or {}).items()},
                   links=dict(d.get("links") or {}))


@dataclass
class Event:
    """One emit(name, value) from the sandbox."""

    name: str
    value: Any


@dataclass
class SessionInfo:
    session_id: str = ""
    rung: str = ""
    staging: str = ""
    workspace: str = ""
    python: str = ""
    #: The shell shell() runs in (bash where the sandbox has it, else sh).
    shell: str = ""
    created: str = ""
    host_objects: Dict[str, List[str]] = field(default_factory=dict)
    #: What the session does not enforce as asked (e.g. no network interception).
    warnings: List[str] = field(default_factory=list)


__all__ = ["Environment", "Action", "ActionRecord", "Process", "FileChange", "NetworkEvent", "Memory", "Violation",
           "Totals", "Decision", "Receipt", "StateDelta", "ShellResult", "PrintEntry", "PrintObject", "PythonError", "PythonResult",
           "Diff", "Event", "SessionInfo", "pathlib"]
