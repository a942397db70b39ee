"""Where the env meets the farm: an action parsed once, sandbox failures as typed exceptions (info only in the
sync wrapper), pools handed in by the farm, typed episode records. Real sandboxes on the ``local`` backend."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from pydantic import BaseModel

import envfarm.envs.actions as actions
from envfarm.envs import AgentEnv, Outcome, tool
from envfarm.envs.meta import AnswerMeta, CodeRepairMeta, EpisodeMeta
from envfarm.errors import BackendUnavailable, InfraError, SandboxCrashed
from envfarm.rollout.environments import start_pools
from envfarm.rollout.episode import Episode, play
from envfarm.rollout.policies import CallablePolicy, Reply, text_reply
from envfarm.rollout.summary import Live
from envfarm.sandbox import get_backend
from envfarm.sandbox.local import LocalBackend
from envfarm.sandbox.pool import Pools


class NoArgs(BaseModel):
    pass


@dataclass(frozen=True)
class Task:
    task_id: str


class CrashEnv(AgentEnv[Task]):
    """``echo`` runs in the sandbox; ``crash`` fails as a dead sandbox would; ``submit`` ends the episode."""

    default_max_steps = 5
    meta_type = AnswerMeta
    crashes = 0

    def generate(self, rng: np.random.Generator) -> Task:
        return Task(f"t{int(rng.integers(100))}")

    def prompt(self, task: Task) -> str:
        return "echo, then submit"

    def oracle(self) -> list[str]:
        return ['{"name": "echo", "arguments": {}}', '{"name": "submit", "arguments": {}}']

    @tool("Run echo in the sandbox.")
    async def echo(self, args: NoArgs) -> str:
        assert self.sandbox is not None
        return (await self.sandbox.exec(["echo", "hi"])).stdout

    @tool("Die like a sandbox that was killed.")
    async def crash(self, args: NoArgs) -> str:
        type(self).crashes += 1
        raise SandboxCrashed("the agent is gone")

    @tool("Finish.")
    async def submit(self, args: NoArgs) -> Outcome:
        return Outcome("done", 1.0, True, {"correct": True, "expected": "hi", "note": "kept"})


CRASH = '{"name": "crash", "arguments": {}}'


def test_async_step_raises_the_typed_error_and_ends_the_episode() -> None:
    env = CrashEnv(backend="local")
    try:
        env.reset(seed=1)

        async def step() -> None:
            await env.astep(CRASH)

        with pytest.raises(SandboxCrashed, match="agent is gone") as caught:
            env._run(step())
        assert isinstance(caught.value, InfraError)
        assert env.done and env.sandbox is None
    finally:
        env.close()


def test_sync_step_alone_reports_it_in_info() -> None:
    env = CrashEnv(backend="local")
    try:
        env.reset(seed=1)
        obs, reward, terminated, truncated, info = env.step(CRASH)
        assert (reward, terminated, truncated) == (0.0, False, True)
        assert info["infra_error"].startswith("SandboxCrashed: the agent is gone") and "infrastructure" in obs
    finally:
        env.close()


async def test_the_farm_parses_each_action_once_and_replays_an_infra_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    real = actions.parse_action

    def counting(action: Any) -> Any:
        calls.append(action)
        return real(action)

    monkeypatch.setattr(actions, "parse_action", counting)
    plan = iter([CRASH, *CrashEnv.oracle(None)])  # type: ignore[arg-type]
    policy = CallablePolicy(lambda messages, tools: next(plan), name="scripted")
    async with Pools([get_backend("local")], size=0) as pools:
        env = CrashEnv(backend="local", pools=pools)
        CrashEnv.crashes = 0
        ep = Episode("e0", "test/Crash", 0, 3, 0, "scripted")
        traj = await play(env, policy, ep, Live(), max_retries=1)
        await env.aclose()
    assert traj.status == "completed" and traj.retries == 1 and CrashEnv.crashes == 1
    assert len(calls) == 3, "each of the 3 actions (crash, echo, submit) is parsed exactly once"
    assert [t.tool_name for t in traj.turns] == ["echo", "submit"]
    assert traj.meta == {"correct": True, "expected": "hi", "note": "kept"}
    assert AnswerMeta.from_json(traj.meta).correct is True


def test_a_reply_carries_its_parse() -> None:
    reply = Reply('<tool_call>{"name": "echo", "arguments": {}}</tool_call>', {})
    assert reply.parsed.call is not None and reply.parsed.tool_name == "echo"
    bad = Reply("no call here", {})
    assert bad.parsed.call is None and "No tool call" in (bad.parsed.error or "")


async def test_an_env_leases_from_the_registry_it_is_given() -> None:
    backend = get_backend("local")
    async with Pools([backend], size=0) as pools:
        env = CrashEnv(backend="local", pools=pools)
        await env.areset(seed=2)
        assert env.pools is pools and len(list(pools)) == 1
        assert next(iter(pools)).backend is backend
        await env.aclose()
        assert not pools.stats()[next(iter(pools.stats()))].leased
    assert backend.live == 0
    await backend.aclose()


def test_meta_round_trips_and_keeps_undeclared_keys() -> None:
    info = {"tools": [], "step": 3, "task_id": "x", "resolved": True, "patch": "diff", "custom": 1}
    meta = CodeRepairMeta.from_info(info)
    assert meta.resolved is True and meta.patch == "diff" and meta.extra == {"custom": 1}
    assert meta.to_json() == {"custom": 1, "resolved": True, "patch": "diff"}
    assert CodeRepairMeta.from_json(json.loads(json.dumps(meta.to_json()))) == meta
    assert EpisodeMeta.from_info(info).to_json() == {"resolved": True, "patch": "diff", "custom": 1}


def test_text_reply_parses_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    real = actions.parse_action
    monkeypatch.setattr(actions, "parse_action", lambda a: calls.append(a) or real(a))

    class View:
        step = 0

    reply = text_reply('{"name": "echo", "arguments": {}}', View())  # type: ignore[arg-type]
    assert len(calls) == 1 and reply.message["tool_calls"][0]["function"]["name"] == "echo"


class BrokenBackend(LocalBackend):
    async def check(self) -> None:
        raise BackendUnavailable("this backend is down")


async def test_start_pools_warms_only_a_shared_image_and_starts_nothing_for_remote_envs() -> None:
    backend = get_backend("local")
    pools, warm = await start_pools("envfarm/ToolCalc-v0", {}, backend, warm=2, max_live=8, prefill=True)
    try:
        assert warm is not None and warm.stats().idle == 2 and list(pools) == [warm]
    finally:
        await pools.aclose()
        await backend.aclose()
    pools, warm = await start_pools("envfarm/CodeRepair-v0", {}, get_backend("local"), warm=2, max_live=8)
    assert warm is None and list(pools) == [] and pools.pool_options["size"] == 0
    await pools.aclose()
    broken = BrokenBackend()
    pools, warm = await start_pools("openenv/Remote-v0", {"base_url": "http://127.0.0.1:9"}, broken, warm=2,
                                    max_live=8)
    assert warm is None and list(pools) == []  # a remote env's farm never touches the backend
    with pytest.raises(BackendUnavailable):
        await start_pools("envfarm/CodeRepair-v0", {}, broken, warm=2, max_live=8)
