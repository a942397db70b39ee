"""Policies: what chooses the next action of an episode.

    policy = make_policy("oracle")                    # the env's reference solution (tests, benches)
    policy = make_policy("random", seed=0)            # a random tool with random arguments
    policy = make_policy("openai:http://127.0.0.1:8000/v1")   # an OpenAI-compatible server (openai_policy.py)
    policy = CallablePolicy(fn)                       # fn(messages, tools) -> str | dict | Reply (or async)

One policy object serves every concurrent episode of a farm: per-episode state lives in
:attr:`EpisodeView.state`, never on the policy. ``act`` returns a :class:`Reply`: the action for
``env.astep``, parsed once (``Reply.parsed``: the env, the transcript and the assistant message all read
it), the assistant message for the transcript, and — when the server gave them — token ids,
log-probabilities and the weight version.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import string
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import InitVar, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from envfarm.envs.actions import ParsedAction, read_action
from envfarm.errors import PolicyError

from .trajectory import WeightVersion

if TYPE_CHECKING:
    from envfarm.envs.core import AgentEnv


@dataclass
class EpisodeView:
    """What a policy sees of one episode. ``messages`` grows turn by turn (OpenAI chat format)."""

    env: AgentEnv[Any]
    seed: int
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    step: int = 0
    """Index of the action being asked for (0 for the first)."""
    rng: np.random.Generator = field(default_factory=np.random.default_rng)
    """Seeded per episode, for policies that sample."""
    state: dict[str, Any] = field(default_factory=dict)
    """Per-episode scratch space for the policy."""


@dataclass(frozen=True)
class Reply:
    """A policy's answer for one turn."""

    action: str | Mapping[str, Any]
    """What the policy produced (text, a tool-call dict or an assistant message)."""
    message: Mapping[str, Any]
    """The assistant message for the transcript (OpenAI format, ``tool_calls`` when a tool was called)."""
    weight_version: WeightVersion = None
    prompt_token_ids: tuple[int, ...] | None = None
    token_ids: tuple[int, ...] | None = None
    logprobs: tuple[float, ...] | None = None
    finish_reason: str | None = None
    parsed: ParsedAction = field(init=False)
    """``action`` parsed once: what ``env.astep`` receives and the transcript records."""
    parsed_as: InitVar[ParsedAction | None] = None
    """The parse a policy already made of ``action`` (else ``action`` is parsed here)."""

    def __post_init__(self, parsed_as: ParsedAction | None) -> None:
        known = parsed_as is not None and parsed_as.raw is self.action
        object.__setattr__(self, "parsed", parsed_as if known else read_action(self.action))


class Policy(ABC):
    """Base of every policy. Subclasses implement :meth:`act`; ``start``/``aclose`` hold resources."""

    name: str = "policy"
    weight_version: WeightVersion = None
    """The newest weight version this policy has seen (None: the policy has no versions)."""

    async def start(self) -> None:
        """Connect, check the server, resolve the model. Raise PolicyUnavailable when it cannot be used."""

    async def aclose(self) -> None:
        """Release connections. Idempotent."""

    async def refresh_version(self) -> WeightVersion:
        """Ask for the current weight version (the farm calls this while it waits on staleness)."""
        return self.weight_version

    @abstractmethod
    async def act(self, view: EpisodeView) -> Reply:
        """The next action of the episode in ``view``."""

    async def __aenter__(self) -> Policy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def assistant_message(action: ParsedAction, call_id: str) -> dict[str, Any]:
    """The assistant message for an action: ``tool_calls`` when it parses, plain text otherwise."""
    raw, call = action.raw, action.call
    if isinstance(raw, Mapping) and raw.get("role") == "assistant":
        return dict(raw)
    if call is None:
        return {"role": "assistant", "content": raw if isinstance(raw, str) else json.dumps(raw)}
    args = json.dumps(dict(call.arguments), ensure_ascii=False)
    fn = {"name": call.name, "arguments": args}
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": call.call_id or call_id, "type": "function", "function": fn}]}


def text_reply(action: str | Mapping[str, Any], view: EpisodeView, **extra: Any) -> Reply:
    """A Reply for a policy that produces actions directly (not chat messages)."""
    parsed = read_action(action)
    return Reply(action, assistant_message(parsed, f"call_{view.step}"), parsed_as=parsed, **extra)


class OraclePolicy(Policy):
    """Plays the env's reference solution (``env.oracle()``); for tests, benches and smoke runs."""

    name = "oracle"

    async def act(self, view: EpisodeView) -> Reply:
        plan: list[str] = view.state.setdefault("oracle", list(view.env.oracle()))
        if view.step >= len(plan):
            raise PolicyError(f"the oracle of {type(view.env).__name__} has {len(plan)} actions and the "
                              f"episode asked for action {view.step + 1}; the env's oracle() does not end "
                              "its task")
        return text_reply(plan[view.step], view)


class RandomPolicy(Policy):
    """A random tool from ``info["tools"]`` with arguments drawn from its JSON schema (a baseline)."""

    name = "random"

    async def act(self, view: EpisodeView) -> Reply:
        if not view.tools:
            return text_reply("(no tools)", view)
        fn = view.tools[int(view.rng.integers(len(view.tools)))]["function"]
        args = _random_value(fn.get("parameters", {}), view.rng, depth=0)
        return text_reply(json.dumps({"name": fn["name"], "arguments": args}), view)


def _random_value(schema: Mapping[str, Any], rng: np.random.Generator, depth: int) -> Any:
    if "enum" in schema:
        return schema["enum"][int(rng.integers(len(schema["enum"])))]
    kind = schema.get("type", "string")
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {}) if depth < 3 else {}
        return {k: _random_value(v, rng, depth + 1) for k, v in props.items()}
    if kind == "array":
        return [_random_value(schema.get("items", {}), rng, depth + 1) for _ in range(int(rng.integers(3)))]
    if kind == "integer":
        return int(rng.integers(-10, 100))
    if kind == "number":
        return round(float(rng.normal(0, 50)), 2)
    if kind == "boolean":
        return bool(rng.integers(2))
    alphabet = string.digits + "+-*/() " + string.ascii_lowercase[:6]
    return "".join(alphabet[int(i)] for i in rng.integers(len(alphabet), size=int(rng.integers(1, 9))))


Messages = list[dict[str, Any]]
PolicyFn = Callable[[Messages, Messages], "str | Mapping[str, Any] | Reply | Awaitable[Any]"]


class CallablePolicy(Policy):
    """Wraps ``fn(messages, tools)`` returning an action (text, dict, assistant message) or a :class:`Reply`.

    An ``async def`` is awaited; a plain function is called on the event loop (keep it quick) or, with
    ``threaded=True``, in a worker thread."""

    def __init__(self, fn: PolicyFn, name: str | None = None, threaded: bool = False) -> None:
        self.fn = fn
        self.name = name or str(getattr(fn, "__name__", "callable"))
        self.threaded = threaded

    async def act(self, view: EpisodeView) -> Reply:
        messages, tools = [dict(m) for m in view.messages], view.tools
        if self.threaded:
            out = await asyncio.to_thread(self.fn, messages, tools)
        else:
            out = self.fn(messages, tools)
        if inspect.isawaitable(out):
            out = await out
        if isinstance(out, Reply):
            return out
        if isinstance(out, str | Mapping):
            return text_reply(out, view)
        raise PolicyError(f"policy {self.name!r} returned {type(out).__name__}; return a str, a dict or a "
                          "Reply")


def tool_messages(message: Mapping[str, Any], observation: str) -> list[dict[str, Any]]:
    """The transcript entries answering ``message``: a ``tool`` message per tool call, else a user message."""
    calls: Sequence[Mapping[str, Any]] = message.get("tool_calls") or ()
    if not calls:
        return [{"role": "user", "content": observation}]
    return [{"role": "tool", "tool_call_id": c.get("id", ""), "content": observation} for c in calls]


__all__ = ["CallablePolicy", "EpisodeView", "OraclePolicy", "Policy", "RandomPolicy", "Reply",
           "assistant_message", "text_reply", "tool_messages"]
