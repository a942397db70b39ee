"""The OpenAI chat-completions wire format of ``envfarm policy serve``: request validation, response bodies.

Pure functions, no I/O: :func:`parse_chat_request` turns a JSON body into a :class:`ChatRequest` (or raises
:class:`RequestError`, answered as an OpenAI-style 400), :func:`completion_body` and :func:`chunk_body`
build ``chat.completion`` / ``chat.completion.chunk`` objects. Beyond OpenAI's fields, every choice carries
``token_ids`` (the completion, eos included), the body carries ``prompt_token_ids`` and ``weight_version``
(as vLLM's ``return_token_ids`` and SGLang's ``weight_version`` do), which the farm's ``openai_policy.py``
reads into each :class:`~envfarm.rollout.trajectory.Turn`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from envfarm.errors import ConfigError

from .base import ParsedCompletion, Sample, Tokenizer

MAX_N = 64
FINISH_TOOL_CALLS = "tool_calls"


class RequestError(ConfigError):
    """A request the server refuses with 400; ``param`` names the offending field."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param, self.code = param, code


@dataclass(frozen=True)
class ChatRequest:
    """A validated ``POST /v1/chat/completions`` body (only what the server uses)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int = 0
    stream: bool = False
    include_usage: bool = False
    seed: int | None = None


def error_body(message: str, kind: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _number(body: Mapping[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise RequestError(f"{key} must be a number in [{lo:g}, {hi:g}], got {value!r}", param=key)
    return float(value)


def _integer(body: Mapping[str, Any], key: str, lo: int, hi: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise RequestError(f"{key} must be an integer in [{lo}, {hi}], got {value!r}", param=key)
    return value


def _messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise RequestError("messages must be a non-empty list of {role, content} objects", param="messages")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise RequestError(f"messages[{i}] must be an object with a role", param=f"messages[{i}]")
    return [dict(m) for m in msgs]


def _tools(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    tools = body.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise RequestError("tools must be a list of {type: function, function: {...}} objects", param="tools")
    return [dict(t) for t in tools]


def parse_chat_request(body: Any, model_name: str) -> ChatRequest:
    """Validate a chat-completions body for the model ``model_name``; :class:`RequestError` when it is bad."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    model = body.get("model")
    if model is not None and model != model_name:
        raise RequestError(f"model {model!r} is not served here; this server serves {model_name!r}",
                           param="model", code="model_not_found")
    if body.get("stop"):
        raise RequestError("stop sequences are not supported; the model stops at its end-of-turn token",
                           param="stop")
    max_tokens = _integer(body, "max_completion_tokens", 1, 1 << 30)
    if max_tokens is None:
        max_tokens = _integer(body, "max_tokens", 1, 1 << 30)
    options = body.get("stream_options") or {}
    top = _integer(body, "top_logprobs", 0, 20) or 0
    if top and not body.get("logprobs"):
        raise RequestError("top_logprobs needs logprobs: true", param="top_logprobs")
    return ChatRequest(
        messages=_messages(body), tools=_tools(body), n=_integer(body, "n", 1, MAX_N) or 1,
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0), top_p=_number(body, "top_p", 1.0, 1e-9, 1.0),
        max_tokens=max_tokens, logprobs=bool(body.get("logprobs")), top_logprobs=top,
        stream=bool(body.get("stream")),
        include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
        seed=_integer(body, "seed", -(1 << 63), (1 << 63) - 1))


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def tool_calls_json(parsed: ParsedCompletion) -> list[dict[str, Any]]:
    return [{"id": c.id or f"call_{uuid.uuid4().hex[:24]}", "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}} for c in parsed.tool_calls]


def message_json(parsed: ParsedCompletion) -> dict[str, Any]:
    calls = tool_calls_json(parsed)
    msg: dict[str, Any] = {"role": "assistant", "content": parsed.content if parsed.content or not calls
                           else None}
    if calls:
        msg["tool_calls"] = calls
    return msg


def finish_reason(sample: Sample, parsed: ParsedCompletion) -> str:
    if sample.finish_reason == "stop" and parsed.tool_calls:
        return FINISH_TOOL_CALLS
    return sample.finish_reason


def logprob_entries(tokenizer: Tokenizer, ids: Sequence[int], logprobs: Sequence[float],
                    tops: Sequence[Sequence[tuple[int, float]]] = ()) -> list[dict[str, Any]]:
    """OpenAI ``logprobs.content`` entries: token text, logprob, its bytes, the alternatives asked for."""
    out = []
    for n, (t, lp) in enumerate(zip(ids, logprobs, strict=True)):
        entry = _token_entry(tokenizer, t, lp)
        entry["top_logprobs"] = [_token_entry(tokenizer, a, alp) for a, alp in tops[n]] if tops else []
        out.append(entry)
    return out


def _token_entry(tokenizer: Tokenizer, token_id: int, logprob: float) -> dict[str, Any]:
    return {"token": tokenizer.decode([token_id]), "logprob": logprob,
            "bytes": list(token_bytes(tokenizer, token_id))}


def token_bytes(tokenizer: Tokenizer, token_id: int) -> bytes:
    fn = getattr(tokenizer, "token_bytes", None)
    return fn(token_id) if fn is not None else tokenizer.decode([token_id]).encode("utf-8")


@dataclass(frozen=True)
class Choice:
    """One finished sample, ready to serialise."""

    sample: Sample
    parsed: ParsedCompletion


def completion_body(*, cid: str, model: str, choices: Sequence[Choice], prompt_ids: Sequence[int],
                    version: Any, logprobs: bool, tokenizer: Tokenizer) -> dict[str, Any]:
    """A ``chat.completion`` object with token ids, logprobs (when asked) and the weight version."""
    out = []
    for i, c in enumerate(choices):
        lp = {"content": logprob_entries(tokenizer, c.sample.token_ids, c.sample.logprobs,
                                         c.sample.top_logprobs)} if logprobs else None
        out.append({"index": i, "message": message_json(c.parsed), "logprobs": lp,
                    "finish_reason": finish_reason(c.sample, c.parsed),
                    "token_ids": list(c.sample.token_ids)})
    return {"id": cid, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": out, "usage": usage(len(prompt_ids), choices), "prompt_token_ids": list(prompt_ids),
            "weight_version": version, "system_fingerprint": f"envfarm-w{version}"}


def usage(prompt_tokens: int, choices: Sequence[Choice]) -> dict[str, int]:
    completion = sum(len(c.sample.token_ids) for c in choices)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion}


def chunk_body(*, cid: str, model: str, created: int, version: Any, index: int, delta: dict[str, Any],
               finish: str | None = None, logprobs: list[dict[str, Any]] | None = None,
               extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One ``chat.completion.chunk`` with a single choice."""
    choice: dict[str, Any] = {"index": index, "delta": delta, "logprobs": {"content": logprobs}
                              if logprobs is not None else None, "finish_reason": finish}
    choice.update(extra or {})
    return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [choice], "weight_version": version, "system_fingerprint": f"envfarm-w{version}"}


__all__ = ["ChatRequest", "Choice", "RequestError", "chunk_body", "completion_body", "error_body",
           "finish_reason", "logprob_entries", "message_json", "new_id", "parse_chat_request",
           "tool_calls_json", "usage"]
