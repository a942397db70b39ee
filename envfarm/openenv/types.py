"""The wire types of envfarm's OpenEnv server: subclasses of OpenEnv's own ``Action``, ``Observation`` and
``State`` (pydantic models from ``openenv.core.env_server.types``), so any OpenEnv client reads them.

    step payload   {"action": "<tool call as text>"}  or  {"action": {"name": "calc", "arguments": {...}}}
    observation    {"text": ..., "tools": [OpenAI function schemas], "info": {...}, "terminated": ...,
                    "truncated": ...}  with OpenEnv's top-level "reward" and "done"
    state          {"episode_id", "step_count", "env_id", "task_id", "done", "oracle"}
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field


class EnvfarmAction(Action):
    """One action: whatever the env's ``step`` accepts."""

    action: str | dict[str, Any] = Field(
        description="An assistant message holding one tool call (text: JSON, <tool_call> tags, a "
                    "Python-style call), or an OpenAI tool-call dict such as "
                    "{\"name\": \"calc\", \"arguments\": {\"expr\": \"6*7\"}}; plain Gymnasium text envs "
                    "get it unchanged.")


class EnvfarmObservation(Observation):
    """What the env returned: the text, its tools and its info; ``done`` is terminated or truncated."""

    text: str = Field(default="", description="The observation text (the task's prompt after reset).")
    tools: list[dict[str, Any]] = Field(default_factory=list,
                                        description="The env's tools in OpenAI function-calling schema.")
    info: dict[str, Any] = Field(default_factory=dict,
                                 description="The env's info dict, JSON-safe (tools are above).")
    terminated: bool = Field(default=False, description="The task ended (an answer was submitted).")
    truncated: bool = Field(default=False,
                            description="The episode was cut: step limit, or an infrastructure error "
                                        "(info.infra_error says which).")


class EnvfarmState(State):
    """The session's episode: OpenEnv's ``episode_id``/``step_count`` plus envfarm's ids."""

    env_id: str = Field(default="", description="The envfarm env id this server serves.")
    task_id: str | None = Field(default=None, description="The current task (None before the first reset).")
    done: bool = Field(default=True, description="No episode is running (none yet, or it ended).")
    oracle: list[str] | None = Field(
        default=None, description="Reference actions for the current task; only with --expose-oracle "
                                  "(tests and benches: a policy that can read it can forge its reward).")


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data: numpy scalars and arrays, fractions and other objects become numbers,
    lists or strings; non-finite floats become strings (JSON has no NaN)."""
    return json.loads(json.dumps(value, default=_fallback, allow_nan=True), parse_constant=str)


def _fallback(obj: Any) -> Any:
    if hasattr(obj, "tolist"):  # numpy arrays and scalars
        return obj.tolist()
    if isinstance(obj, Mapping):
        return dict(obj)
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    if hasattr(obj, "__float__") and not isinstance(obj, str):
        number = float(obj)
        return number if math.isfinite(number) else str(number)
    return str(obj)


__all__ = ["EnvfarmAction", "EnvfarmObservation", "EnvfarmState", "jsonable"]
