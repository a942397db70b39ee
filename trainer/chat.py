"""Chat templates: OpenAI messages + tools -> prompt text, and completions <-> assistant messages.

Built-in (byte-level model; every byte costs a forward position, so it is compact)::

    <|user|>Solve ... Tools: ... {"name": ..., "arguments": {...}} ...<|eot|><|assistant|>
    <tool_call>{"name":"calc","arguments":{"expr":"3*4"}}</tool_call><|eot|><|tool|>12<|eot|><|assistant|>

The JSON schema of ``tools`` is not rendered: ``BuiltinTemplate(tool_list=True)`` (what the built-in policy
uses) adds one short ``<|system|>Tools: calc(expr) submit(answer)<|eot|>`` line naming them, and the envs
either list them with the call format in the first user message (``tool_help=True``) or leave that to the
API (``tool_help=False``, what ``envfarm train`` uses: half the bytes of a ToolCalc prompt). A
conversation renders as the concatenation of its turns, so the prompt of turn k+1 starts with the prompt and
completion (eos included) of turn k. :class:`HFTemplate` uses a Hugging Face tokenizer's own chat template
when it has one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .base import ParsedCompletion, ToolCall
from .tokenizer import ASSISTANT, EOT, SYSTEM, TOOL, USER

TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"
_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)


def content_text(content: Any) -> str:
    """A message's ``content`` as text: None -> "", a list of parts -> their text joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(str(p.get("text", "")) if isinstance(p, Mapping) else str(p) for p in content)
    return str(content)


def _arguments(value: Any) -> Any:
    """OpenAI's JSON-text arguments as an object when they parse (else the text itself)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value if value is not None else {}


def render_tool_call(call: Mapping[str, Any], compact: bool = True) -> str:
    """``<tool_call>{"name":...,"arguments":{...}}</tool_call>`` for an OpenAI ``tool_calls`` entry."""
    fn = call.get("function", call)
    body = {"name": fn.get("name", ""), "arguments": _arguments(fn.get("arguments"))}
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":") if compact else None)
    return f"{TOOL_OPEN}{text}{TOOL_CLOSE}" if compact else f"{TOOL_OPEN}\n{text}\n{TOOL_CLOSE}"


def _tool_call(text: str) -> ToolCall | None:
    try:
        obj = json.loads(text.strip())
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    if not isinstance(args, dict):
        return None
    return ToolCall(name=obj["name"], arguments=json.dumps(args, ensure_ascii=False))


def parse_tool_calls(text: str) -> ParsedCompletion:
    """Tool calls inside ``<tool_call>`` tags (whitespace and a missing final close tag tolerated); the rest,
    and any call that is not well-formed JSON with a name and object arguments, stays content (exactly,
    unless it is only whitespace), so ``render_completion`` of the parsed message gives back a canonical
    completion byte for byte and the next turn's prompt continues this one's tokens."""
    calls: list[ToolCall] = []
    kept: list[str] = []
    pos = 0
    for m in _CALL.finditer(text):
        call = _tool_call(m.group(1))
        if call is None:
            continue
        kept.append(text[pos:m.start()])
        calls.append(call)
        pos = m.end()
    if not calls:
        return ParsedCompletion(content=text)
    kept.append(text[pos:])
    content = "".join(kept)  # not stripped: "Sure. <tool_call>..." renders back to the same text
    return ParsedCompletion(content=content if content.strip() else "", tool_calls=tuple(calls))


class BuiltinTemplate:
    """Role markers + contents, each message closed by ``end`` (the tokenizer's end of turn)."""

    def __init__(self, end: str = EOT, tool_list: bool = False, markers: Mapping[str, str] | None = None,
                 ) -> None:
        self.end = end
        self.tool_list = tool_list
        self.markers = dict(markers or {"system": SYSTEM, "developer": SYSTEM, "user": USER,
                                        "assistant": ASSISTANT, "tool": TOOL})

    def render_prompt(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]) -> str:
        parts = [self._tools_line(tools)] if self.tool_list and tools else []
        parts.extend(self.render_message(m) for m in messages)
        parts.append(self.markers["assistant"])
        return "".join(parts)

    def render_message(self, message: Mapping[str, Any]) -> str:
        role = str(message.get("role", "user"))
        marker = self.markers.get(role, self.markers["user"])
        if role == "assistant":
            body = self.render_completion(message)
        else:
            body = content_text(message.get("content"))
        return f"{marker}{body}{self.end}"

    def render_completion(self, message: Mapping[str, Any]) -> str:
        calls = message.get("tool_calls") or ()
        return content_text(message.get("content")) + "".join(render_tool_call(c) for c in calls)

    def parse_completion(self, text: str) -> ParsedCompletion:
        return parse_tool_calls(text)

    def _tools_line(self, tools: Sequence[Mapping[str, Any]]) -> str:
        names = []
        for t in tools:
            fn = t.get("function", t)
            params = ",".join((fn.get("parameters") or {}).get("properties", {}))
            names.append(f"{fn.get('name', '')}({params})")
        return f"{self.markers['system']}Tools: {' '.join(names)}{self.end}"


class HFTemplate:
    """A Hugging Face tokenizer's own chat template (``apply_chat_template`` with tools) when it has one,
    else :class:`BuiltinTemplate` closed by the tokenizer's eos text. Completions use Hermes/Qwen
    ``<tool_call>`` blocks, which is what those templates render for past assistant tool calls."""

    def __init__(self, hf_tokenizer: Any) -> None:
        self.hf = hf_tokenizer
        self.native = bool(getattr(hf_tokenizer, "chat_template", None))
        self.fallback = BuiltinTemplate(end=hf_tokenizer.eos_token or "",
                                        markers={"system": "System: ", "developer": "System: ",
                                                 "user": "User: ", "assistant": "Assistant: ",
                                                 "tool": "Tool: "})

    def render_prompt(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]) -> str:
        if not self.native:
            return self.fallback.render_prompt(messages, tools)
        msgs = [_hf_message(m) for m in messages]
        text = self.hf.apply_chat_template(msgs, tools=list(tools) or None, add_generation_prompt=True,
                                           tokenize=False)
        return str(text)

    def render_completion(self, message: Mapping[str, Any]) -> str:
        if not self.native:
            return self.fallback.render_completion(message)
        calls = message.get("tool_calls") or ()
        text = content_text(message.get("content"))
        return text + "".join(("\n" if text or i else "") + render_tool_call(c, compact=False)
                              for i, c in enumerate(calls))

    def parse_completion(self, text: str) -> ParsedCompletion:
        return parse_tool_calls(text)


def _hf_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """HF chat templates want tool-call arguments as objects, not OpenAI's JSON text."""
    out = dict(message)
    if out.get("tool_calls"):
        out["tool_calls"] = [
            {**c, "function": {**c.get("function", {}), "arguments": _arguments(c.get("function", {})
                                                                               .get("arguments"))}}
            for c in out["tool_calls"]]
    if out.get("content") is not None and not isinstance(out["content"], str):
        out["content"] = content_text(out["content"])
    return out


__all__ = ["TOOL_CLOSE", "TOOL_OPEN", "BuiltinTemplate", "HFTemplate", "content_text", "parse_tool_calls",
           "render_tool_call"]
