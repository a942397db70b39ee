"""Running one episode: reset, ask the policy, step the env, until the env says it is over.

A sandbox that crashes or hangs (an :class:`~envfarm.errors.InfraError` from ``areset`` or ``astep``, or
the episode passing its time limit) throws the attempt away and the episode is played again from its seed
with a fresh sandbox, up to ``max_retries`` times; after that it is recorded with ``infra_error``, never as a
reward of 0. A :class:`PolicyError` records the episode as ``policy_error``; any other exception (a bug in an
env) as ``error``; both leave the other episodes alone. :class:`PolicyUnavailable` propagates: the farm stops.

An attempt at a grouped task (``groups.py``) starts on a fork of the task's prepared env instead of a reset;
a failure there (the reset or the fork) is that attempt's infrastructure error, and its retry resets.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from envfarm.envs.core import AgentEnv
from envfarm.errors import InfraError, PolicyError, PolicyUnavailable

from .groups import Groups, Started
from .policies import EpisodeView, Policy, Reply, tool_messages
from .summary import Live
from .trajectory import Status, Timings, Trajectory, Turn, oldest_version

log = logging.getLogger(__name__)


@dataclass
class Episode:
    """A trajectory being built; the farm keeps these for the episodes in flight."""

    episode_id: str
    env_id: str
    index: int
    seed: int
    attempt: int
    policy: str
    started_at: float = field(default_factory=time.time)
    t0: float = field(default_factory=time.monotonic)
    task_id: str = ""
    retries: int = 0
    turns: list[Turn] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    sandbox_s: float = 0.0
    policy_s: float = 0.0
    env_s: float = 0.0
    queue_s: float = 0.0
    grade_s: float = 0.0

    def restart(self) -> None:
        """Forget the failed attempt's transcript; keep the time it cost."""
        self.turns, self.messages, self.meta = [], [], {}

    def build(self, status: Status, infra_error: str | None = None, error: str | None = None) -> Trajectory:
        timings = Timings(sandbox_s=self.sandbox_s, policy_s=self.policy_s, env_s=self.env_s,
                          queue_s=self.queue_s, grade_s=self.grade_s, total_s=time.monotonic() - self.t0)
        return Trajectory(
            episode_id=self.episode_id, env_id=self.env_id, index=self.index, seed=self.seed,
            task_id=self.task_id, status=status, turns=tuple(self.turns), messages=tuple(self.messages),
            tools=tuple(self.tools), infra_error=infra_error, error=error, retries=self.retries,
            weight_version=oldest_version([t.weight_version for t in self.turns]), policy=self.policy,
            attempt=self.attempt, timings=timings, started_at=self.started_at, meta=self.meta)


async def play(env: AgentEnv[Any], policy: Policy, ep: Episode, live: Live, *, max_retries: int = 1,
               timeout_s: float | None = None, step_slots: asyncio.Semaphore | None = None,
               groups: Groups | None = None) -> Trajectory:
    """Play ``ep`` to its end (see the module docstring); each ``astep`` holds one of ``step_slots``. With
    ``groups``, a grouped task's first try plays on a fork of its prepared env (``groups.py``); ``env`` is
    reset for the rest."""
    while True:
        try:
            async with asyncio.timeout(timeout_s):
                await _attempt(env, policy, ep, live, step_slots, groups)
            return ep.build("completed")
        except PolicyUnavailable:
            raise
        except InfraError as e:
            infra = f"{type(e).__name__}: {e}"
        except TimeoutError:
            infra = f"the episode ran past its {timeout_s:g}s limit"
        except PolicyError as e:
            return ep.build("policy_error", error=str(e))
        except Exception as e:  # a bug in an env or a policy must not stop the other episodes
            log.exception("episode %s (%s seed %d) failed", ep.episode_id, ep.env_id, ep.seed)
            return ep.build("error", error=f"{type(e).__name__}: {e}")
        if ep.retries >= max_retries:
            log.warning("episode %s: infrastructure error after %d retries: %s", ep.episode_id, ep.retries,
                        infra)
            return ep.build("infra_error", infra_error=infra)
        ep.retries += 1
        log.info("episode %s: infrastructure error, retrying on a fresh sandbox: %s", ep.episode_id, infra)
        ep.restart()


async def _attempt(env: AgentEnv[Any], policy: Policy, ep: Episode, live: Live,
                   slots: asyncio.Semaphore | None, groups: Groups | None) -> None:
    t = time.monotonic()
    async with _start(env, ep, groups) as (env, obs, info):
        ep.sandbox_s += time.monotonic() - t
        ep.task_id = str(info.get("task_id", ""))
        ep.tools = list(info.get("tools", []))
        ep.messages.append({"role": "user", "content": obs})
        rng = np.random.default_rng([ep.seed, ep.attempt, ep.retries])
        view = EpisodeView(env, ep.seed, ep.messages, ep.tools, rng=rng)
        while not await _turn_of(env, policy, ep, view, live, slots):
            pass


@asynccontextmanager
async def _start(env: AgentEnv[Any], ep: Episode, groups: Groups | None) -> AsyncIterator[Started]:
    """The attempt's env at its first state: a fork of its task's prepared env when the task is grouped
    (first try only: a retry starts from a fresh reset), else ``env`` reset to the seed."""
    if groups is not None and ep.retries == 0 and groups.grouped(ep.seed):
        async with groups.start(ep.seed) as started:
            yield started
    else:
        obs, info = await env.areset(seed=ep.seed)
        yield env, obs, info


async def _turn_of(env: AgentEnv[Any], policy: Policy, ep: Episode, view: EpisodeView, live: Live,
                   slots: asyncio.Semaphore | None) -> bool:
    """One turn: the policy acts, the env steps; True when the episode is over."""
    view.step = len(ep.turns)
    t0 = time.monotonic()
    reply = await policy.act(view)
    t1 = time.monotonic()
    if slots is not None:
        async with slots:
            t_in = time.monotonic()
            obs, reward, terminated, truncated, info = await env.astep(reply.parsed)
    else:
        t_in = t1
        obs, reward, terminated, truncated, info = await env.astep(reply.parsed)
    t2 = time.monotonic()
    ep.policy_s += t1 - t0
    ep.queue_s += t_in - t1
    ep.env_s += t2 - t_in
    live.step()
    ep.messages.append(dict(reply.message))
    ep.messages.extend(tool_messages(reply.message, obs))
    ep.turns.append(_turn(reply, obs, reward, terminated, truncated, info, t1 - t0, t2 - t_in))
    if terminated or truncated:
        ep.grade_s += t2 - t_in
        ep.meta = _jsonable(env.meta_type.from_info(info).to_json())
        return True
    return False


def _turn(reply: Reply, obs: str, reward: float, terminated: bool, truncated: bool, info: Mapping[str, Any],
          policy_s: float, env_s: float) -> Turn:
    action = reply.action if isinstance(reply.action, str) else json.dumps(reply.action, ensure_ascii=False)
    tool_name = reply.parsed.tool_name
    return Turn(action=action, observation=obs, reward=float(reward), terminated=bool(terminated),
                truncated=bool(truncated), tool_name=tool_name, action_error=info.get("action_error"),
                weight_version=reply.weight_version, prompt_token_ids=reply.prompt_token_ids,
                token_ids=reply.token_ids, logprobs=reply.logprobs, finish_reason=reply.finish_reason,
                policy_s=round(policy_s, 6), env_s=round(env_s, 6))


def _jsonable(data: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(dict(data), default=str))
    return out


__all__ = ["Episode", "play"]
