"""What one episode produced: a :class:`Trajectory` (frozen, JSON round trip) made of :class:`Turn` s.

One JSON object per line in every file and stream of the farm (spool, ``--out``, the learner's NDJSON):

    {"episode_id": "3f2a9c1b0d4e:000017", "env_id": "envfarm/ToolCalc-v0", "index": 17, "seed": 17,
     "task_id": "toolcalc-2-...", "status": "completed", "reward": 1.0, "turns": [...], "messages": [...],
     "tools": [...], "weight_version": 4, "timings": {"policy_s": ..., "env_s": ..., "sandbox_s": ...}, ...}

``messages`` is the OpenAI chat transcript (user prompt, assistant turns with ``tool_calls``, ``tool``
answers), ready for a chat template; ``turns`` holds the same episode step by step with rewards, token ids
and log-probabilities where the policy server returned them. A trajectory whose ``infra_error`` is set was
broken by the infrastructure (a crashed or hung sandbox, twice): it is data about the farm, not a reward of 0.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

Status = Literal["completed", "infra_error", "policy_error", "error", "interrupted"]
STATUSES: tuple[Status, ...] = ("completed", "infra_error", "policy_error", "error", "interrupted")
WeightVersion = int | str | None
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Turn:
    """One policy action and the environment's answer to it."""

    action: str
    """What the env was given, as text (the tool call JSON, or the model's raw text when it made none)."""
    observation: str
    reward: float
    terminated: bool
    truncated: bool
    tool_name: str | None = None
    """The tool the env ran, or None when the action did not parse (see ``action_error``)."""
    action_error: str | None = None
    """``parse`` / ``unknown_tool`` / ``arguments`` when the env rejected the action (reward 0 for it)."""
    weight_version: WeightVersion = None
    """Version of the policy weights that produced this action (from the policy server's reply)."""
    prompt_token_ids: tuple[int, ...] | None = None
    token_ids: tuple[int, ...] | None = None
    """Completion token ids, when the server returned them."""
    logprobs: tuple[float, ...] | None = None
    """Log-probability of each completion token, when the server returned them."""
    finish_reason: str | None = None
    policy_s: float = 0.0
    """Seconds waiting for the policy."""
    env_s: float = 0.0
    """Seconds in ``env.astep`` (parsing, the tool in the sandbox, grading)."""


@dataclass(frozen=True)
class Timings:
    """Where an episode's wall time went, in seconds."""

    sandbox_s: float = 0.0
    """Getting the sandbox ready: ``env.areset`` (pool lease, setup), or for an attempt of a grouped task
    the wait for its prepared env and the fork of it; summed over retries."""
    policy_s: float = 0.0
    """Waiting for the policy, summed over turns."""
    env_s: float = 0.0
    """Inside ``env.astep``, summed over turns."""
    queue_s: float = 0.0
    """Waiting for a step slot (``FarmConfig.step_slots``), summed over turns."""
    total_s: float = 0.0
    """Wall time of the whole episode, retries included; the rest is the farm's own overhead."""
    grade_s: float = 0.0
    """The part of ``env_s`` spent in the step that ended the episode (a submit: the grading)."""


@dataclass(frozen=True)
class Trajectory:
    """One finished (or interrupted) episode. Frozen; ``to_json``/``from_json`` round-trip exactly."""

    episode_id: str
    """Unique across runs: ``<run id>:<index>``; a retry or a resume reuses it (receivers dedup on it)."""
    env_id: str
    index: int
    """Position in the run (0 .. episodes-1)."""
    seed: int
    """The seed given to ``env.areset``: the task."""
    task_id: str
    status: Status
    turns: tuple[Turn, ...] = ()
    messages: tuple[Mapping[str, Any], ...] = ()
    """OpenAI chat transcript: the prompt, assistant messages (with ``tool_calls``) and tool answers."""
    tools: tuple[Mapping[str, Any], ...] = ()
    """The env's tools in the OpenAI function schema (what the policy was offered)."""
    infra_error: str | None = None
    error: str | None = None
    """What went wrong when ``status`` is ``policy_error``, ``error`` or ``interrupted``."""
    retries: int = 0
    """Attempts thrown away because of an infrastructure error before this one."""
    weight_version: WeightVersion = None
    """The oldest weight version among the turns (the one that decides staleness)."""
    policy: str = ""
    attempt: int = 0
    """For evaluation: which of the k attempts at this task (0-based)."""
    timings: Timings = field(default_factory=Timings)
    started_at: float = 0.0
    """Unix time."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Free-form extras (the env's final info, e.g. ``correct``/``expected``)."""

    @property
    def rewards(self) -> tuple[float, ...]:
        return tuple(t.reward for t in self.turns)

    @property
    def reward(self) -> float:
        """The episode's return: the sum of its rewards."""
        return float(sum(self.rewards))

    @property
    def steps(self) -> int:
        return len(self.turns)

    @property
    def ok(self) -> bool:
        """True when the episode ran to its end (terminated or truncated by the env) without failing."""
        return self.status == "completed"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (shallow: messages and tools are shared, not copied; ``asdict`` is 5x slower)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["turns"] = [dict(vars(t)) for t in self.turns]
        out["messages"], out["tools"] = list(self.messages), list(self.tools)
        out["timings"], out["meta"] = dict(vars(self.timings)), dict(self.meta)
        out["reward"] = self.reward
        out["schema"] = SCHEMA_VERSION
        return out

    def to_json(self) -> str:
        """One line of JSON (no newline inside)."""
        return json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Trajectory:
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in data.items() if k in known}
        kw["turns"] = tuple(_turn(t) for t in data.get("turns", ()))
        kw["messages"] = tuple(data.get("messages", ()))
        kw["tools"] = tuple(data.get("tools", ()))
        kw["timings"] = Timings(**_known(Timings, data.get("timings", {})))
        kw["meta"] = dict(data.get("meta", {}))
        if kw.get("status") not in STATUSES:
            raise ValueError(f"trajectory {data.get('episode_id')!r} has unknown status {kw.get('status')!r}")
        return cls(**kw)

    @classmethod
    def from_json(cls, line: str | bytes) -> Trajectory:
        return cls.from_dict(json.loads(line))


def _known(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of ``data`` that are fields of ``cls`` (records written by a newer envfarm still load)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def _turn(data: Mapping[str, Any]) -> Turn:
    kw = _known(Turn, data)
    for key in ("prompt_token_ids", "token_ids", "logprobs"):
        if kw.get(key) is not None:
            kw[key] = tuple(kw[key])
    return Turn(**kw)


def oldest_version(versions: Sequence[WeightVersion]) -> WeightVersion:
    """The oldest of the turns' weight versions: the smallest int, else the first non-None label."""
    ints = [v for v in versions if isinstance(v, int)]
    if ints:
        return min(ints)
    return next((v for v in versions if v is not None), None)


__all__ = ["STATUSES", "Status", "Timings", "Trajectory", "Turn", "WeightVersion", "oldest_version"]
