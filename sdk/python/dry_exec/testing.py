"""A scripted model server on loopback, for testing agent loops offline.

It speaks both APIs the agent uses, over real HTTP: OpenAI-compatible
``POST /v1/chat/completions`` (base URL ``server.openai_base``) and the
Anthropic ``POST /v1/messages`` (base URL ``server.anthropic_base``), and
answers each request with the script's next turn, deterministically:

    with ScriptedModel([
        call("run_trial", command="echo hi > a.txt"),       # a tool call
        lambda req: call("finish", success=True),            # a turn computed from the request
    ]) as m:
        os.environ.update(m.env())                           # OPENAI_BASE_URL, …
        Agent(task="…").run_sync()

A turn is a dict: {"calls": [(name, arguments), …], "text": …} (arguments a
dict, or a str sent as is: malformed JSON on purpose), {"text": …} (a final
answer), {"refusal": …}, {"hang": True} (never answers: a model timeout),
{"status": 500, "body": …} (an HTTP error), {"raw": "…"} (a body that is
not the API's shape), with an optional "tokens" (usage reported, default
10). A callable turn gets the request (``Request``) and returns a turn. The
script may be any iterable, endless generators included (a model that never
stops); once it is spent, every answer is {"text": "script ended"}.
"""

from __future__ import annotations

import itertools
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union

Turn = Union[Dict[str, Any], Callable[["Request"], Dict[str, Any]]]


def call(name: str, _raw: Optional[str] = None, **arguments: Any) -> Dict[str, Any]:
    """A turn with one tool call (``_raw``: the arguments text, verbatim)."""
    return {"calls": [(name, _raw if _raw is not None else arguments)]}


@dataclass
class Request:
    """One request the server got: its API ("openai" or "anthropic") and body."""

    api: str
    body: Dict[str, Any]

    def tool_results(self) -> List[Any]:
        """The tool results in the request's last turn, JSON-decoded where
        they are JSON (what the agent told the model)."""
        out: List[Any] = []
        msgs = self.body.get("messages") or []
        if self.api == "openai":
            for m in reversed(msgs):
                if m.get("role") != "tool":
                    break
                out.insert(0, _maybe_json(m.get("content")))
        elif msgs and isinstance(msgs[-1].get("content"), list):
            out = [_maybe_json(b.get("content")) for b in msgs[-1]["content"] if b.get("type") == "tool_result"]
        return out

    def last_result(self) -> Any:
        r = self.tool_results()
        return r[-1] if r else None


def _maybe_json(s: Any) -> Any:
    try:
        return json.loads(s)
    except (TypeError, ValueError):
        return s


class ScriptedModel:
    """The server; a context manager (stopped on exit)."""

    def __init__(self, script: Iterable[Turn], model: str = "scripted-model") -> None:
        self._script: Iterator[Turn] = iter(script)
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self.model = model
        self.requests: List[Request] = []
        self._n = itertools.count()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:  # noqa: N802
                if self.path.rstrip("/").endswith("/models"):
                    self._json(200, {"object": "list", "data": [{"id": owner.model, "object": "model"}]})
                else:
                    self._json(404, {"error": {"message": "no such path"}})

            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(n) or b"{}")
                except ValueError:
                    self._json(400, {"error": {"message": "not JSON"}})
                    return
                if self.path.endswith("/chat/completions"):
                    api = "openai"
                elif self.path.endswith("/v1/messages"):
                    api = "anthropic"
                else:
                    self._json(404, {"error": {"message": "no such path %s" % self.path}})
                    return
                req = Request(api, body)
                turn = owner._next(req)
                if turn.get("hang"):
                    owner._closed.wait()
                    return
                if "status" in turn:
                    self._raw(int(turn["status"]), json.dumps({"error": {"message": turn.get("body", "error")}}))
                    return
                if "raw" in turn:
                    self._raw(200, str(turn["raw"]))
                    return
                self._json(200, _openai(turn, owner.model) if api == "openai" else _anthropic(turn, owner.model))

            def _json(self, status: int, obj: Any) -> None:
                self._raw(status, json.dumps(obj))

            def _raw(self, status: int, text: str) -> None:
                b = text.encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(b)))
                    self.end_headers()
                    self.wfile.write(b)
                except OSError:
                    pass  # the client gave up (a timeout test)

        self._srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._srv.daemon_threads = True
        self._thread = threading.Thread(target=self._srv.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._srv.server_address[:2]
        return "http://%s:%d" % (host, port)

    @property
    def openai_base(self) -> str:
        return self.url + "/v1"

    @property
    def anthropic_base(self) -> str:
        return self.url

    def env(self, api: str = "openai") -> Dict[str, str]:
        """The environment variables that point the agent at this server."""
        if api == "anthropic":
            return {"DRYEXEC_AGENT_PROVIDER": "anthropic", "ANTHROPIC_BASE_URL": self.anthropic_base,
                    "ANTHROPIC_API_KEY": "scripted", "ANTHROPIC_MODEL": self.model}
        return {"DRYEXEC_AGENT_PROVIDER": "openai", "OPENAI_BASE_URL": self.openai_base,
                "OPENAI_API_KEY": "scripted", "OPENAI_MODEL": self.model}

    def _next(self, req: Request) -> Dict[str, Any]:
        with self._lock:
            self.requests.append(req)
            turn = next(self._script, None)
        if turn is None:
            return {"text": "script ended"}
        if callable(turn):
            try:
                turn = turn(req)
            except Exception as e:  # noqa: BLE001 - a test's check failed: say so in the answer
                return {"status": 500, "body": "the scripted turn failed: %s: %s" % (type(e).__name__, e)}
        return turn

    def close(self) -> None:
        self._closed.set()
        self._srv.shutdown()
        self._srv.server_close()

    def __enter__(self) -> "ScriptedModel":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _calls(turn: Dict[str, Any]) -> List[Tuple[str, str, Union[str, Dict[str, Any]]]]:
    out = []
    for i, (name, args) in enumerate(turn.get("calls") or []):
        out.append(("call_%d_%s" % (i, name), name, args))
    return out


def _openai(turn: Dict[str, Any], model: str) -> Dict[str, Any]:
    msg: Dict[str, Any] = {"role": "assistant", "content": turn.get("text")}
    if turn.get("refusal"):
        msg["refusal"] = turn["refusal"]
    calls = _calls(turn)
    if calls:
        msg["tool_calls"] = [{"id": cid, "type": "function",
                              "function": {"name": n, "arguments": a if isinstance(a, str) else json.dumps(a)}}
                             for cid, n, a in calls]
    return {"id": "chatcmpl-scripted", "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "message": msg, "finish_reason": turn.get("finish_reason") or
                         ("tool_calls" if calls else "stop")}],
            "usage": {"prompt_tokens": 0, "completion_tokens": turn.get("tokens", 10),
                      "total_tokens": turn.get("tokens", 10)}}


def _anthropic(turn: Dict[str, Any], model: str) -> Dict[str, Any]:
    content: List[Dict[str, Any]] = []
    if turn.get("text") or turn.get("refusal"):
        content.append({"type": "text", "text": turn.get("text") or turn.get("refusal")})
    calls = _calls(turn)
    for cid, n, a in calls:
        # The Messages API sends input as an object; a malformed one is sent
        # as the string it is (what a broken proxy would pass through).
        content.append({"type": "tool_use", "id": cid, "name": n, "input": a})
    stop = "refusal" if turn.get("refusal") else ("tool_use" if calls else turn.get("finish_reason") or "end_turn")
    return {"id": "msg_scripted", "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop, "usage": {"input_tokens": 0, "output_tokens": turn.get("tokens", 10)}}
