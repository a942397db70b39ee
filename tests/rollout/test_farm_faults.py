"""Faults on real bwrap sandboxes: sandboxes killed from outside, the policy server going down, the learner
killed and restarted, a bug in one episode. Nothing is lost, nothing is duplicated, nothing is a silent 0."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from rollout_support import StubServer, free_port, read_jsonl

from envfarm.errors import PolicyUnavailable
from envfarm.rollout import (
    EpisodeView,
    Farm,
    FarmConfig,
    FileSink,
    HTTPSink,
    OpenAIPolicy,
    OraclePolicy,
    Reply,
    Trajectory,
)

pytestmark = pytest.mark.bwrap


def config(episodes: int, concurrency: int, **kw: Any) -> FarmConfig:
    return FarmConfig(env_id="envfarm/ToolCalc-v0", episodes=episodes, concurrency=concurrency,
                      backend="bwrap", **kw)


class KillingOracle(OraclePolicy):
    """The oracle, but it SIGKILLs the episode's sandbox (its bwrap process) from outside before its first
    action, ``kills[seed]`` times for that seed. It acts once the sandbox's processes are gone: they die of
    bwrap's death signal, which a loaded machine can deliver after the agent has answered one more call."""

    def __init__(self, kills: dict[int, int]) -> None:
        self.kills = dict(kills)

    async def act(self, view: EpisodeView) -> Reply:
        if view.step == 0 and self.kills.get(view.seed, 0) > 0:
            self.kills[view.seed] -= 1
            handle = view.env.sandbox._handle  # type: ignore[union-attr]
            os.kill(handle.pid, signal.SIGKILL)
            for _ in range(1000):
                if not handle.cgroup.pids():
                    break
                await asyncio.sleep(0.01)
        return await super().act(view)


class FreezingOracle(OraclePolicy):
    """The oracle, but it SIGSTOPs every process of the episode's sandbox before its first action,
    ``freezes[seed]`` times for that seed: the tool call then hangs (a wedged sandbox)."""

    def __init__(self, freezes: dict[int, int]) -> None:
        self.freezes = dict(freezes)

    async def act(self, view: EpisodeView) -> Reply:
        if view.step == 0 and self.freezes.get(view.seed, 0) > 0:
            self.freezes[view.seed] -= 1
            for pid in view.env.sandbox._handle.cgroup.pids():  # type: ignore[union-attr]
                os.kill(pid, signal.SIGSTOP)
        return await super().act(view)


def bwrap_children() -> list[int]:
    """Host pids of the bwrap processes this test process started (its sandboxes)."""
    me, out = str(os.getpid()), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            comm, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
            if comm == "bwrap" and rest[1] == me:
                out.append(int(entry))
    return out


def leased_pids(farm: Farm) -> list[int]:
    """Host pids of the bwrap sandboxes the farm's pool has leased to episodes right now."""
    pool = farm._pool
    return [sb._handle.pid for sb in list(pool._leased.values()) if sb.alive] if pool is not None else []


async def test_killed_sandboxes_are_retried_once_then_recorded(tmp_path: Path) -> None:
    policy = KillingOracle({0: 1, 1: 1, 2: 2})
    trajs = {t.seed: t async for t in Farm(config(8, 4), policy, run_dir=tmp_path / "run").run()}
    assert trajs[0].status == trajs[1].status == "completed" and trajs[0].retries == trajs[1].retries == 1
    assert trajs[0].reward == 1.0 and len(trajs[0].turns) == 2  # the broken attempt's turns are gone
    broken = trajs[2]
    assert broken.status == "infra_error" and broken.retries == 1
    assert "SandboxCrashed" in (broken.infra_error or "")
    assert all(trajs[s].status == "completed" and trajs[s].retries == 0 for s in range(3, 8))
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["infra_errors"], summary["infra_retries"], summary["episodes_failed"]) == (1, 3, 1)
    assert summary["mean_reward"] == 1.0  # the infra error is not a 0 in the mean


async def test_hung_sandboxes_time_out_are_retried_once_then_recorded(tmp_path: Path) -> None:
    # 6 s: far past a normal episode (even on a loaded machine), well before the frozen calc's own 5 s + grace
    farm = Farm(config(6, 3, episode_timeout_s=6.0, prefill=True), FreezingOracle({0: 1, 1: 2}),
                run_dir=tmp_path / "run")
    trajs = {t.seed: t async for t in farm.run()}
    assert len(trajs) == 6
    assert trajs[0].status == "completed" and trajs[0].retries == 1 and trajs[0].reward == 1.0
    assert trajs[1].status == "infra_error" and trajs[1].retries == 1 and trajs[1].reward == 0.0
    assert "ran past its 6s limit" in (trajs[1].infra_error or "")
    assert all(trajs[s].status == "completed" and trajs[s].retries == 0 for s in range(2, 6))
    s = farm.summary()
    assert (s.infra_errors, s.infra_retries, s.episodes_failed, s.mean_reward) == (1, 2, 1, 1.0)
    assert farm._pool is not None and farm._pool.backend.live == 0 and not bwrap_children()  # frozen ones too


async def test_sandboxes_killed_at_random_never_give_a_silent_zero(tmp_path: Path) -> None:
    async def slow_oracle_step(view: EpisodeView) -> Reply:
        await asyncio.sleep(0.03)
        return await OraclePolicy.act(policy, view)

    policy = OraclePolicy()
    policy.act = slow_oracle_step  # type: ignore[method-assign]
    farm = Farm(config(24, 6), policy, run_dir=tmp_path / "run")
    killed = 0

    async def killer() -> None:
        nonlocal killed
        while not farm.live.active:  # noqa: ASYNC110 - let the farm start before the chaos does
            await asyncio.sleep(0.01)
        while True:
            await asyncio.sleep(0.15)
            for pid in leased_pids(farm)[:2]:  # in an episode (an idle pool sandbox would prove nothing)
                os.kill(pid, signal.SIGKILL)
                killed += 1

    task = asyncio.create_task(killer())
    try:
        trajs = [t async for t in farm.run()]
    finally:
        task.cancel()
        await asyncio.wait([task])
    assert killed >= 2 and len(trajs) == 24
    for t in trajs:
        ok = t.status == "completed" and t.reward == 1.0
        assert ok or (t.status == "infra_error" and t.infra_error), t
    assert sum(t.retries for t in trajs) >= 1


async def test_policy_server_down_stops_the_run_and_records_in_flight(stub: StubServer,
                                                                      tmp_path: Path) -> None:
    stub.delay_s = 0.05
    policy = OpenAIPolicy(stub.url, max_retries=2, backoff_s=0.01, backoff_max_s=0.05, timeout_s=2)
    farm = Farm(config(40, 4), policy, run_dir=tmp_path / "run", sinks=[FileSink(tmp_path / "out.jsonl")])
    got: list[Trajectory] = []
    with pytest.raises(PolicyUnavailable, match=rf"{stub.url}/chat/completions failed 3 times"):
        async for t in farm.run():
            got.append(t)
            if len(got) == 4:
                await stub.stop()
    s = farm.summary()
    assert s.stopped is not None and s.stopped.startswith("PolicyUnavailable")
    interrupted = read_jsonl(tmp_path / "run" / "interrupted.jsonl")
    assert len(interrupted) == s.episodes_interrupted >= 1
    assert all(t["status"] == "interrupted" and "PolicyUnavailable" in t["error"] for t in interrupted)
    assert len(read_jsonl(tmp_path / "out.jsonl")) == len(got) == s.episodes_completed
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["stopped"] == s.stopped


async def test_a_policy_server_that_is_down_at_start_starts_no_sandbox(tmp_path: Path) -> None:
    policy = OpenAIPolicy(f"http://127.0.0.1:{free_port()}/v1", max_retries=1, backoff_s=0.01)
    farm = Farm(config(4, 4), policy, run_dir=tmp_path / "run")
    with pytest.raises(PolicyUnavailable, match="failed 2 times"):
        async for _ in farm.run():
            pass
    assert farm._pool is None and not bwrap_children()
    s = farm.summary()
    assert s.stopped is not None and s.stopped.startswith("PolicyUnavailable") and s.episodes_remaining == 4


async def test_learner_killed_and_restarted_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    port, store = free_port(), tmp_path / "received.jsonl"

    async def start_receiver() -> asyncio.subprocess.Process:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "envfarm.rollout.receiver", "--port", str(port), "--store", str(store),
            stdout=asyncio.subprocess.PIPE)
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert b"listening on" in line, line
        return proc

    receiver = await start_receiver()
    sink = HTTPSink(f"http://127.0.0.1:{port}", max_backlog=8, backoff_s=0.05, backoff_max_s=0.3)
    farm = Farm(config(40, 4), OraclePolicy(), run_dir=tmp_path / "run",
                sinks=[sink, FileSink(tmp_path / "out.jsonl")])
    restarted, finished_at_kill = False, -1

    async def chaos() -> None:
        nonlocal receiver, restarted, finished_at_kill
        while len(read_jsonl(store)) < 8:  # noqa: ASYNC110 - polling a file another process writes
            await asyncio.sleep(0.02)
        finished_at_kill = farm.tally.finished
        receiver.kill()  # SIGKILL: no goodbye
        await receiver.wait()
        await asyncio.sleep(0.8)
        receiver = await start_receiver()
        restarted = True

    task = asyncio.create_task(chaos())
    try:
        trajs = [t async for t in farm.run()]
        await asyncio.wait_for(task, 30)
    finally:
        task.cancel()
        await asyncio.wait([task])
        receiver.kill()
        await receiver.wait()
    assert restarted and len(trajs) == 40
    assert 8 <= finished_at_kill < 40  # the learner died mid-run, not after it
    ids = [r["episode_id"] for r in read_jsonl(store)]
    assert len(ids) == 40 and len(set(ids)) == 40
    assert sorted(ids) == sorted(t.episode_id for t in trajs)
    learner = farm.summary().sinks["learner"]
    assert (learner["backlog"], learner["delivered"]) == (0, 40)


async def test_a_failing_episode_does_not_stop_the_others(tmp_path: Path) -> None:
    class Buggy(OraclePolicy):
        async def act(self, view: EpisodeView) -> Reply:
            if view.seed % 4 == 0:
                raise ValueError("a bug in the policy")
            return await super().act(view)

    farm = Farm(config(12, 4), Buggy(), run_dir=tmp_path / "run")
    trajs = {t.seed: t async for t in farm.run()}
    assert len(trajs) == 12
    for seed, t in trajs.items():
        if seed % 4 == 0:
            assert t.status == "error" and t.error == "ValueError: a bug in the policy" and t.retries == 0
        else:
            assert t.status == "completed" and t.reward == 1.0
    assert farm.summary().errors == 3 and farm.summary().stopped is None
