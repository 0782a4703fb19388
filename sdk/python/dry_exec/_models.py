"""Model backends of the agent loop: any OpenAI-compatible chat-completions
endpoint with tool calls (OpenAI, llama.cpp, vLLM, Ollama, …) and the
Anthropic Messages API, over the standard library's HTTP client.

Configuration comes from the environment (docs/agent.md); a DRYEXEC_ name
wins over the ecosystem's usual one:

    provider   DRYEXEC_AGENT_PROVIDER = openai | anthropic (else: inferred)
    OpenAI     DRYEXEC_OPENAI_BASE_URL / OPENAI_BASE_URL (default https://api.openai.com/v1)
               DRYEXEC_OPENAI_API_KEY  / OPENAI_API_KEY
               DRYEXEC_OPENAI_MODEL    / OPENAI_MODEL
    Anthropic  DRYEXEC_ANTHROPIC_BASE_URL / ANTHROPIC_BASE_URL (default https://api.anthropic.com)
               DRYEXEC_ANTHROPIC_API_KEY  / ANTHROPIC_API_KEY
               DRYEXEC_ANTHROPIC_MODEL    / ANTHROPIC_MODEL
    both       DRYEXEC_MODEL (the model, whichever provider)
               DRYEXEC_MODEL_TIMEOUT (seconds per model request, default 120)
"""

from __future__ import annotations

import json
import os
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from ._errors import DryExecError

OPENAI_DEFAULT_BASE = "https://api.openai.com/v1"
ANTHROPIC_DEFAULT_BASE = "https://api.anthropic.com"
#: The model used with the hosted OpenAI API when none is named.
OPENAI_DEFAULT_MODEL = "gpt-4o-mini"
#: The model used with the Anthropic API when none is named.
ANTHROPIC_DEFAULT_MODEL = "claude-sonnet-4-5"
ANTHROPIC_VERSION = "2023-06-01"
#: At most this much of a model's answer is read.
MAX_ANSWER = 8 << 20

MODEL_VARIABLES = ("set OPENAI_BASE_URL (an OpenAI-compatible endpoint: llama.cpp, vLLM, Ollama, …) and/or "
                   "OPENAI_API_KEY (and OPENAI_MODEL), or ANTHROPIC_API_KEY (and ANTHROPIC_MODEL); "
                   "DRYEXEC_-prefixed names (DRYEXEC_OPENAI_BASE_URL, …) win over them, "
                   "DRYEXEC_AGENT_PROVIDER=openai|anthropic chooses when both are set")


class ModelNotConfigured(DryExecError):
    """No model endpoint is configured for the agent loop: the message says
    which environment variables to set. Raised before any trial runs."""

    code = "model_not_configured"


class ModelError(DryExecError):
    """The model endpoint failed: unreachable, an HTTP error, a timeout, an
    answer that is not the API's shape. ``kind`` is "timeout", "http",
    "unreachable" or "malformed"."""

    code = "model_error"

    def __init__(self, message: str, kind: str = "http", status: int = 0) -> None:
        super().__init__(message, status=status)
        self.kind = kind


@dataclass
class ToolCall:
    id: str
    name: str
    #: The arguments as the model sent them (a JSON text for OpenAI; for
    #: Anthropic the input object, re-encoded).
    arguments: str


@dataclass
class Reply:
    text: str = ""
    tool_calls: List[ToolCall] = field(default_factory=list)
    #: The model refused (OpenAI's message.refusal, Anthropic's "refusal").
    refusal: Optional[str] = None
    stop_reason: str = ""
    tokens: int = 0


@dataclass
class ModelConfig:
    """Where the agent's model is. ``provider`` is "openai" (any
    OpenAI-compatible chat-completions endpoint) or "anthropic"."""

    provider: str
    base_url: str
    model: str = ""
    api_key: str = ""
    timeout: float = 120.0
    #: The output tokens asked for per request.
    max_output_tokens: int = 2048

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None) -> "ModelConfig":
        """The configuration the environment gives, or ModelNotConfigured."""
        e = os.environ if env is None else env

        def get(*names: str) -> str:
            for n in names:
                v = e.get(n, "").strip()
                if v:
                    return v
            return ""

        provider = get("DRYEXEC_AGENT_PROVIDER").lower()
        o_base = get("DRYEXEC_OPENAI_BASE_URL", "OPENAI_BASE_URL", "OPENAI_API_BASE")
        o_key = get("DRYEXEC_OPENAI_API_KEY", "OPENAI_API_KEY")
        a_key = get("DRYEXEC_ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY")
        a_base = get("DRYEXEC_ANTHROPIC_BASE_URL", "ANTHROPIC_BASE_URL")
        timeout_s = get("DRYEXEC_MODEL_TIMEOUT")
        try:
            timeout = float(timeout_s) if timeout_s else 120.0
            if not timeout > 0:
                raise ValueError
        except ValueError:
            raise ModelNotConfigured("DRYEXEC_MODEL_TIMEOUT=%r: want a positive number of seconds" % timeout_s) from None
        if provider not in ("", "openai", "anthropic"):
            raise ModelNotConfigured("DRYEXEC_AGENT_PROVIDER=%r: want openai or anthropic" % provider)
        if not provider:
            if o_base or o_key:
                provider = "openai"
            elif a_key or a_base:
                provider = "anthropic"
            else:
                raise ModelNotConfigured("the agent loop needs a model and none is configured: " + MODEL_VARIABLES)
        if provider == "openai":
            base = o_base or OPENAI_DEFAULT_BASE
            if base == OPENAI_DEFAULT_BASE and not o_key:
                raise ModelNotConfigured("the hosted OpenAI API needs a key: set OPENAI_API_KEY (or "
                                         "DRYEXEC_OPENAI_API_KEY), or point OPENAI_BASE_URL at a local endpoint")
            model = get("DRYEXEC_MODEL", "DRYEXEC_OPENAI_MODEL", "OPENAI_MODEL")
            if not model and base == OPENAI_DEFAULT_BASE:
                model = OPENAI_DEFAULT_MODEL
            cfg = cls("openai", base, model, o_key, timeout)
        else:
            if not a_key:
                raise ModelNotConfigured("the Anthropic API needs a key: set ANTHROPIC_API_KEY (or "
                                         "DRYEXEC_ANTHROPIC_API_KEY)")
            model = get("DRYEXEC_MODEL", "DRYEXEC_ANTHROPIC_MODEL", "ANTHROPIC_MODEL") or ANTHROPIC_DEFAULT_MODEL
            cfg = cls("anthropic", a_base or ANTHROPIC_DEFAULT_BASE, model, a_key, timeout)
        if not cfg.base_url.startswith(("http://", "https://")):
            raise ModelNotConfigured("%s base URL %r: want an http:// or https:// URL" % (provider, cfg.base_url))
        return cfg


def _post(url: str, body: Dict[str, Any], headers: Dict[str, str], timeout: float) -> Dict[str, Any]:
    data = json.dumps(body).encode("utf-8")
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers=dict(headers, **{"Content-Type": "application/json"}))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - the configured endpoint
            raw = resp.read(MAX_ANSWER + 1)
    except urllib.error.HTTPError as e:
        detail = e.read(2000).decode("utf-8", "replace")
        raise ModelError("%s answered HTTP %d: %s" % (url, e.code, detail.strip()[:500]), "http", e.code) from None
    except (socket.timeout, TimeoutError):
        raise ModelError("%s did not answer within %gs" % (url, timeout), "timeout") from None
    except urllib.error.URLError as e:
        if isinstance(e.reason, (socket.timeout, TimeoutError)):
            raise ModelError("%s did not answer within %gs" % (url, timeout), "timeout") from None
        raise ModelError("%s is unreachable: %s" % (url, e.reason), "unreachable") from None
    except OSError as e:
        raise ModelError("%s: %s" % (url, e), "unreachable") from None
    if len(raw) > MAX_ANSWER:
        raise ModelError("%s: answer larger than %d bytes" % (url, MAX_ANSWER), "malformed")
    try:
        out = json.loads(raw)
    except ValueError:
        raise ModelError("%s: the answer is not JSON: %r" % (url, raw[:200]), "malformed") from None
    if not isinstance(out, dict):
        raise ModelError("%s: the answer is not a JSON object" % url, "malformed")
    return out


def _get(url: str, headers: Dict[str, str], timeout: float) -> Dict[str, Any]:
    req = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310
            out = json.loads(resp.read(MAX_ANSWER))
    except Exception as e:  # noqa: BLE001
        raise ModelError("%s: %s" % (url, e), "unreachable") from None
    return out if isinstance(out, dict) else {}


class Backend:
    """Sends the conversation (neutral messages) and tools to a model."""

    def __init__(self, cfg: ModelConfig) -> None:
        self.cfg = cfg

    def complete(self, system: str, messages: List[Dict[str, Any]], tools: List[Dict[str, Any]],
                 timeout: Optional[float] = None) -> Reply:
        """The model's answer; timeout (seconds) cuts the configured one."""
        raise NotImplementedError

    def _timeout(self, timeout: Optional[float]) -> float:
        return self.cfg.timeout if timeout is None else max(0.001, min(self.cfg.timeout, timeout))


def _tokens_estimate(obj: Any) -> int:
    # An endpoint that reports no usage still spends tokens: ~4 bytes each.
    return len(json.dumps(obj)) // 4 + 1


class OpenAIBackend(Backend):
    """Chat completions with function tools (OpenAI's API, and the servers
    that speak it)."""

    def _headers(self) -> Dict[str, str]:
        return {"Authorization": "Bearer " + self.cfg.api_key} if self.cfg.api_key else {}

    def _model(self, timeout: float) -> str:
        if not self.cfg.model:
            # A local server (llama.cpp, vLLM, Ollama) serves the models it
            # lists; with none named, the first is the one it has loaded.
            # A server that lists none (or has no /models) gets the hosted
            # API's default name: many local servers ignore the name anyway.
            try:
                data = _get(self.cfg.base_url.rstrip("/") + "/models", self._headers(), timeout).get("data") or []
            except ModelError:
                data = []
            ok = data and isinstance(data[0], dict) and data[0].get("id")
            self.cfg.model = str(data[0]["id"]) if ok else OPENAI_DEFAULT_MODEL
        return self.cfg.model

    def complete(self, system: str, messages: List[Dict[str, Any]], tools: List[Dict[str, Any]],
                 timeout: Optional[float] = None) -> Reply:
        t = self._timeout(timeout)
        msgs: List[Dict[str, Any]] = [{"role": "system", "content": system}]
        for m in messages:
            if m["role"] == "assistant":
                a: Dict[str, Any] = {"role": "assistant", "content": m.get("text") or None}
                if m.get("tool_calls"):
                    a["tool_calls"] = [{"id": c.id, "type": "function",
                                        "function": {"name": c.name, "arguments": c.arguments}}
                                       for c in m["tool_calls"]]
                msgs.append(a)
            elif m["role"] == "tool":
                msgs.append({"role": "tool", "tool_call_id": m["id"], "content": m["text"]})
            else:
                msgs.append({"role": "user", "content": m["text"]})
        body = {"model": self._model(t), "messages": msgs, "max_tokens": self.cfg.max_output_tokens,
                "tools": [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                                            "parameters": t["schema"]}} for t in tools]}
        out = _post(self.cfg.base_url.rstrip("/") + "/chat/completions", body, self._headers(), t)
        try:
            choice = out["choices"][0]
            msg = choice["message"]
        except (KeyError, IndexError, TypeError):
            raise ModelError("the answer has no choices[0].message: %s" % json.dumps(out)[:300], "malformed") from None
        calls = []
        for i, c in enumerate(msg.get("tool_calls") or []):
            fn = (c or {}).get("function") or {}
            args = fn.get("arguments")
            if not isinstance(args, str):
                args = json.dumps(args)
            calls.append(ToolCall(str(c.get("id") or "call_%d" % i), str(fn.get("name") or ""), args))
        usage = out.get("usage") or {}
        tokens = usage.get("total_tokens") if isinstance(usage, dict) else None
        if not isinstance(tokens, int):
            tokens = _tokens_estimate(body) + _tokens_estimate(msg)
        return Reply(text=msg.get("content") or "", tool_calls=calls, refusal=msg.get("refusal") or None,
                     stop_reason=str(choice.get("finish_reason") or ""), tokens=tokens)


class AnthropicBackend(Backend):
    """The Anthropic Messages API with tools."""

    def complete(self, system: str, messages: List[Dict[str, Any]], tools: List[Dict[str, Any]],
                 timeout: Optional[float] = None) -> Reply:
        t = self._timeout(timeout)
        msgs: List[Dict[str, Any]] = []
        for m in messages:
            if m["role"] == "assistant":
                content: List[Dict[str, Any]] = []
                if m.get("text"):
                    content.append({"type": "text", "text": m["text"]})
                for c in m.get("tool_calls") or []:
                    try:
                        inp = json.loads(c.arguments)
                    except ValueError:
                        inp = {}
                    content.append({"type": "tool_use", "id": c.id, "name": c.name,
                                    "input": inp if isinstance(inp, dict) else {}})
                msgs.append({"role": "assistant", "content": content or [{"type": "text", "text": "…"}]})
            elif m["role"] == "tool":
                block = {"type": "tool_result", "tool_use_id": m["id"], "content": m["text"]}
                if m.get("is_error"):
                    block["is_error"] = True
                # Consecutive tool results go in one user turn.
                if msgs and msgs[-1]["role"] == "user" and isinstance(msgs[-1]["content"], list):
                    msgs[-1]["content"].append(block)
                else:
                    msgs.append({"role": "user", "content": [block]})
            else:
                msgs.append({"role": "user", "content": m["text"]})
        body = {"model": self.cfg.model, "system": system, "messages": msgs, "max_tokens": self.cfg.max_output_tokens,
                "tools": [{"name": t["name"], "description": t["description"], "input_schema": t["schema"]}
                          for t in tools]}
        headers = {"x-api-key": self.cfg.api_key, "anthropic-version": ANTHROPIC_VERSION}
        out = _post(self.cfg.base_url.rstrip("/") + "/v1/messages", body, headers, t)
        content = out.get("content")
        if not isinstance(content, list):
            raise ModelError("the answer has no content list: %s" % json.dumps(out)[:300], "malformed")
        texts, calls = [], []
        for i, b in enumerate(content):
            if not isinstance(b, dict):
                continue
            if b.get("type") == "text":
                texts.append(str(b.get("text") or ""))
            elif b.get("type") == "tool_use":
                inp = b.get("input")
                calls.append(ToolCall(str(b.get("id") or "toolu_%d" % i), str(b.get("name") or ""),
                                      inp if isinstance(inp, str) else json.dumps(inp)))
        stop = str(out.get("stop_reason") or "")
        usage = out.get("usage") or {}
        tokens = 0
        if isinstance(usage, dict):
            tokens = int(usage.get("input_tokens") or 0) + int(usage.get("output_tokens") or 0)
        if not tokens:
            tokens = _tokens_estimate(body) + _tokens_estimate(content)
        text = "\n".join(texts)
        return Reply(text=text, tool_calls=calls, refusal=(text or "refused") if stop == "refusal" else None,
                     stop_reason=stop, tokens=tokens)


def backend(cfg: ModelConfig) -> Backend:
    if cfg.provider == "anthropic":
        return AnthropicBackend(cfg)
    if cfg.provider == "openai":
        return OpenAIBackend(cfg)
    raise ModelNotConfigured("provider %r: want openai or anthropic" % cfg.provider)
