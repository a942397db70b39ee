"""Parsing an agent's action into one tool call.

An action is what the model said on its turn. Accepted forms (one tool call per step):

1. OpenAI-style call JSON:            ``{"name": "calc", "arguments": {"expr": "2+2"}}``
   (``arguments`` may also be a JSON-encoded string, as the OpenAI API returns it)
2. An OpenAI assistant message:       ``{"role": "assistant", "content": "...", "tool_calls": [{"id": "c1",
   "type": "function", "function": {"name": "calc", "arguments": "{\\"expr\\": \\"2+2\\"}"}}]}``
3. Hermes/Qwen tags inside free text: ``I'll compute it. <tool_call>{"name": "calc", "arguments":
   {"expr": "2+2"}}</tool_call>``
4. Any of the above as a Python ``dict`` instead of a JSON string (the "structured" form).

Anything else is an :class:`ActionError` whose message says what was wrong and what is accepted; the env
turns it into an observation, never an exception.

An action is parsed once: :func:`read_action` gives a :class:`ParsedAction` (the raw action with its tool
call, or the reason there is none). The policy's ``Reply`` carries it, and the env, the episode's transcript
and the policy's assistant message all read that one result; ``astep`` parses only raw text or dicts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from envfarm.errors import FarmError

TAG = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
FORMAT_HELP = (
    'Call exactly one tool per turn, as JSON: {"name": "<tool>", "arguments": {...}} — on its own, inside '
    "<tool_call>...</tool_call> tags, or as an OpenAI assistant message with one entry in tool_calls."
)


class ActionError(FarmError, ValueError):
    """The action could not be understood; the message is written for the agent."""


@dataclass(frozen=True)
class ToolCall:
    """One parsed tool call."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    call_id: str | None = None


@dataclass(frozen=True)
class ParsedAction:
    """An action read once: what the policy produced, and its tool call or why there is none."""

    raw: str | Mapping[str, Any]
    call: ToolCall | None
    error: str | None = None
    """The :class:`ActionError` message for the agent when ``call`` is None."""

    @property
    def tool_name(self) -> str | None:
        return self.call.name if self.call is not None else None


Action = str | Mapping[str, Any] | ParsedAction
"""What ``AgentEnv.astep`` accepts: raw text, a dict, or an action already read by :func:`read_action`."""


def read_action(action: Action) -> ParsedAction:
    """``action`` parsed (once: a ParsedAction is returned as it is); never raises."""
    if isinstance(action, ParsedAction):
        return action
    try:
        return ParsedAction(action, parse_action(action))
    except ActionError as e:
        return ParsedAction(action, None, str(e))


def parse_action(action: str | Mapping[str, Any]) -> ToolCall:
    """The single tool call in ``action`` (see module docstring), or ActionError explaining the problem."""
    if isinstance(action, Mapping):
        return _from_object(action)
    if not isinstance(action, str):
        raise ActionError(f"An action must be text or a dict, not {type(action).__name__}. {FORMAT_HELP}")
    text = action.strip()
    tagged = TAG.findall(text)
    if len(tagged) > 1:
        raise ActionError(f"Found {len(tagged)} <tool_call> blocks; make one call per turn. {FORMAT_HELP}")
    if tagged:
        return _from_object(_load_json(tagged[0], "the <tool_call> block"))
    if text.startswith("{"):
        return _from_object(_load_json(text, "the action"))
    raise ActionError(f"No tool call found in your message. {FORMAT_HELP}")


def _load_json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        snippet = text[max(0, e.pos - 20) : e.pos + 20]
        raise ActionError(f"{where} is not valid JSON ({e.msg} at char {e.pos}, near {snippet!r}). "
                          f"{FORMAT_HELP}") from None


def _from_object(obj: Any) -> ToolCall:
    if not isinstance(obj, Mapping):
        raise ActionError(f"Expected a JSON object, got {type(obj).__name__}. {FORMAT_HELP}")
    if "tool_calls" in obj:
        return _from_message(obj)
    if "function" in obj and isinstance(obj["function"], Mapping):
        return _from_object({**obj["function"], "id": obj.get("id")})
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise ActionError(f'The tool call has no "name" string. {FORMAT_HELP}')
    return ToolCall(name, _arguments(obj.get("arguments", obj.get("parameters", {}))), obj.get("id"))


def _from_message(msg: Mapping[str, Any]) -> ToolCall:
    calls = msg.get("tool_calls") or []
    if not isinstance(calls, list) or not calls:
        raise ActionError(f"The message has no tool_calls. {FORMAT_HELP}")
    if len(calls) > 1:
        raise ActionError(f"The message has {len(calls)} tool_calls; make one call per turn. {FORMAT_HELP}")
    return _from_object(calls[0])


def _arguments(raw: Any) -> Mapping[str, Any]:
    if isinstance(raw, str):
        raw = _load_json(raw, "the arguments string") if raw.strip() else {}
    if not isinstance(raw, Mapping):
        raise ActionError(f'"arguments" must be a JSON object, got {type(raw).__name__}. {FORMAT_HELP}')
    return dict(raw)
