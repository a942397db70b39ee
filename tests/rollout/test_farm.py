"""The farm on real sandboxes (ToolCalc on bwrap; one docker run): policies, sinks, staleness, resume."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from rollout_support import StubServer, read_jsonl

from envfarm.errors import ConfigError
from envfarm.rollout import (
    CallablePolicy,
    Farm,
    FarmConfig,
    FileSink,
    HTTPSink,
    OpenAIPolicy,
    Receiver,
    Trajectory,
    make_policy,
)
from envfarm.rollout.eval import run_eval

TOOLCALC = "envfarm/ToolCalc-v0"


def config(episodes: int, concurrency: int, backend: str = "bwrap", **kw: Any) -> FarmConfig:
    return FarmConfig(env_id=TOOLCALC, episodes=episodes, concurrency=concurrency, backend=backend, **kw)


async def collect(farm: Farm) -> list[Trajectory]:
    return [t async for t in farm.run()]


@pytest.mark.bwrap
async def test_oracle_run_writes_every_episode_once(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    farm = Farm(config(24, 6), make_policy("oracle"), run_dir=tmp_path / "run", sinks=[FileSink(out)],
                summary_path=tmp_path / "summary.json")
    trajs = await collect(farm)
    assert len(trajs) == 24 and {t.index for t in trajs} == set(range(24))
    assert all(t.status == "completed" and t.reward == 1.0 and t.steps == 2 for t in trajs)
    t = trajs[0]
    assert t.messages[1]["tool_calls"][0]["function"]["name"] == "calc" and t.messages[2]["role"] == "tool"
    assert t.timings.total_s >= t.timings.sandbox_s + t.timings.env_s > 0 and t.tools
    lines = read_jsonl(out)
    assert sorted(x["episode_id"] for x in lines) == sorted(t.episode_id for t in trajs)
    summary = json.loads((tmp_path / "summary.json").read_text())
    for key in ("episodes_completed", "episodes_failed", "max_concurrent", "steps", "wall_s", "mean_reward",
                "infra_errors", "nodes_used"):
        assert key in summary
    assert (summary["episodes_completed"], summary["episodes_failed"], summary["steps"]) == (24, 0, 48)
    assert summary["max_concurrent"] == 6 and summary["mean_reward"] == 1.0 and summary["nodes_used"] == 1
    assert summary == json.loads((tmp_path / "run" / "summary.json").read_text())


@pytest.mark.bwrap
async def test_openai_policy_on_toolcalc(stub: StubServer, tmp_path: Path) -> None:
    stub.weight_version = 3
    policy = OpenAIPolicy(stub.url, backoff_s=0.01)
    stub.fail_next.extend([429, 500])
    trajs = await collect(Farm(config(10, 4), policy, run_dir=tmp_path / "run"))
    assert all(t.status == "completed" and t.reward == 1.0 for t in trajs), [t.error for t in trajs]
    t = trajs[0]
    assert t.weight_version == 3 and all(turn.token_ids == (100, 101, 102) for turn in t.turns)
    assert t.turns[0].logprobs == pytest.approx((-0.1, -0.2, -0.3)) and t.policy == policy.name
    assert [m["role"] for m in t.messages] == ["user", "assistant", "tool", "assistant", "tool"]
    assert t.messages[2]["tool_call_id"] == t.messages[1]["tool_calls"][0]["id"]
    assert policy.retries == 2 and stub.bodies[0]["tools"][0]["function"]["name"] == "calc"


@pytest.mark.bwrap
async def test_leaving_the_loop_tears_the_farm_down(tmp_path: Path) -> None:
    farm = Farm(config(50, 4), make_policy("oracle"), run_dir=tmp_path / "run")
    async with contextlib.aclosing(farm.run()) as trajs:
        async for _ in trajs:
            break
    s = farm.summary()
    assert s.stopped == "interrupted" and s.episodes_completed >= 1 and s.episodes_remaining > 0
    assert farm._pool is not None and farm._pool.stats().live == 0 and farm._pool.backend.live == 0
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["stopped"] == "interrupted"


@pytest.mark.bwrap
async def test_random_and_callable_policies(tmp_path: Path) -> None:
    farm = Farm(config(6, 3, step_slots=1), make_policy("random"))
    trajs = await collect(farm)
    assert len(trajs) == 6 and all(t.status == "completed" for t in trajs)
    assert set(farm.summary().time_split) == {"sandbox", "policy", "env", "queue", "farm"}

    def wrong(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        return '{"name": "submit", "arguments": {"answer": "-1"}}' if len(messages) > 2 else "no tool call"

    trajs = await collect(Farm(config(4, 2), CallablePolicy(wrong)))
    assert all(t.reward == 0.0 and t.turns[0].action_error == "parse" for t in trajs)
    assert trajs[0].messages[2]["role"] == "user"  # the error observation answers a plain-text turn


@pytest.mark.bwrap
async def test_max_episode_steps_in_env_kwargs_truncates(tmp_path: Path) -> None:
    """gymnasium.make takes max_episode_steps itself (TimeLimit); the farm steps the unwrapped env."""
    chatty = CallablePolicy(lambda messages, tools: "no tool call")
    trajs = await collect(Farm(config(2, 2, env_kwargs={"max_episode_steps": 2}), chatty))
    assert [len(t.turns) for t in trajs] == [2, 2] and all(t.turns[-1].truncated for t in trajs)


@pytest.mark.bwrap
async def test_resume_runs_each_episode_once(tmp_path: Path) -> None:
    out, run = tmp_path / "out.jsonl", tmp_path / "run"

    stopping: list[Farm] = []

    async def slow(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        for farm in stopping:  # stop from inside an action, so the acting episode is surely in flight
            farm.stop(cancel=True)
        await asyncio.sleep(0.05)
        return '{"name": "submit", "arguments": {"answer": "0"}}'

    farm = Farm(config(30, 4), CallablePolicy(slow), run_dir=run, sinks=[FileSink(out)])
    seen = 0
    async for _ in farm.run():
        seen += 1
        if seen == 6:
            stopping.append(farm)
    first = farm.summary()
    assert first.stopped == "interrupted" and first.episodes_interrupted >= 1
    assert len(read_jsonl(run / "interrupted.jsonl")) == first.episodes_interrupted
    with pytest.raises(ConfigError, match="episodes: run has 30, asked 31"):
        await collect(Farm(config(31, 4), CallablePolicy(slow), run_dir=run, resume=True))
    stopping.clear()
    farm = Farm(config(30, 8), CallablePolicy(slow), run_dir=run, resume=True, sinks=[FileSink(out)])
    await collect(farm)
    ids = [x["episode_id"] for x in read_jsonl(out)]
    assert len(ids) == 30 and len(set(ids)) == 30
    assert len(read_jsonl(run / "spool.jsonl")) == 30
    s = farm.summary()
    assert (s.episodes_completed, s.episodes_remaining, s.stopped) == (30, 0, None)
    assert s.wall_s_total > s.wall_s


@pytest.mark.bwrap
async def test_a_refused_run_folder_keeps_its_files(tmp_path: Path) -> None:
    run, summary = tmp_path / "run", tmp_path / "summary.json"
    await collect(Farm(config(3, 3), make_policy("oracle"), run_dir=run, summary_path=summary))
    before = {p: p.read_bytes() for p in (summary, run / "summary.json", run / "spool.jsonl")}
    with pytest.raises(ConfigError, match="already holds a run; continue it with --resume"):
        await collect(Farm(config(3, 3), make_policy("oracle"), run_dir=run, summary_path=summary))
    lines = (run / "spool.jsonl").read_text().splitlines()
    (run / "spool.jsonl").write_text("\n".join([lines[0], "garbage{", lines[2]]) + "\n")
    before[run / "spool.jsonl"] = (run / "spool.jsonl").read_bytes()
    farm = Farm(config(3, 3), make_policy("oracle"), run_dir=run, resume=True, summary_path=summary)
    with pytest.raises(ConfigError, match=r"spool\.jsonl line 2 is not a trajectory"):
        await collect(farm)
    assert farm.run_dir is None
    assert {p: p.read_bytes() for p in before} == before


@pytest.mark.bwrap
async def test_slow_learner_applies_backpressure(tmp_path: Path) -> None:
    """A learner that takes nothing until the farm pauses: the farm must pause (however slow the machine),
    with the backlog within its bound, then deliver everything once the learner catches up."""
    caught_up = asyncio.Event()

    async def stuck_ingest(record: dict[str, Any]) -> None:
        await caught_up.wait()

    receiver = Receiver(on_accept=stuck_ingest)
    url = await receiver.start()
    sink = HTTPSink(url, max_backlog=3)
    farm = Farm(config(16, 4), make_policy("oracle"), run_dir=tmp_path / "run", sinks=[sink])
    backlog, paused = [], []

    async def watch() -> None:
        while True:
            if farm.deliveries:
                backlog.append(farm.deliveries[0].backlog)
            paused.append(farm.live.paused or "")
            if paused[-1].startswith("waiting for sink learner"):
                caught_up.set()
            await asyncio.sleep(0.005)

    watcher = asyncio.create_task(watch())
    try:
        async with asyncio.timeout(300):  # a farm that never pauses would wait for the learner forever
            await collect(farm)
    finally:
        watcher.cancel()
        await asyncio.wait([watcher])
        await receiver.aclose()
    assert max(backlog) <= 3 + 4  # the bound plus the episodes already in flight
    assert any(p.startswith("waiting for sink learner") for p in paused)
    assert len(receiver.records()) == 16 and farm.summary().sinks["learner"]["backlog"] == 0


@pytest.mark.bwrap
async def test_staleness_holds_episodes_until_the_policy_catches_up(stub: StubServer, tmp_path: Path) -> None:
    stub.weight_version = 1
    receiver = Receiver(weight_version=5)
    url = await receiver.start()
    farm = Farm(config(6, 3, max_staleness=2), OpenAIPolicy(stub.url), run_dir=tmp_path / "run",
                sinks=[HTTPSink(url)])
    task = asyncio.create_task(collect(farm))
    try:
        for _ in range(300):
            if farm.live.paused:
                break
            await asyncio.sleep(0.01)
        assert "4 behind the learner's v5 (max 2)" in (farm.live.paused or "")
        await asyncio.sleep(0.5)
        assert farm.tally.finished == 0 and stub.completions == 0
        stub.weight_version = 3  # new weights published: within the staleness bound
        trajs = await asyncio.wait_for(task, 30)
    finally:
        task.cancel()
        await asyncio.wait([task])
        await receiver.aclose()
    assert len(trajs) == 6 and {t.weight_version for t in trajs} == {3}


@pytest.mark.bwrap
async def test_eval_reports_pass_at_k(tmp_path: Path) -> None:
    async def half(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        return '{"name": "submit", "arguments": {"answer": "-1"}}'

    report = await run_eval(config(6, 3, attempts=2), make_policy("oracle"), tmp_path / "a")
    assert report.tasks == 3
    assert report.metrics["pass@1"].value == 1.0 and report.metrics["pass@2"].value == 1.0
    assert all(r.attempts == 2 and r.successes == 2 for r in report.per_task)
    report = await run_eval(config(4, 2, attempts=1), CallablePolicy(half), tmp_path / "b")
    assert report.metrics["pass@1"].value == 0.0 and report.metrics["pass@1"].method == "wilson"
    assert 0 < report.metrics["pass@1"].high < 0.6


@pytest.mark.docker
async def test_docker_run(tmp_path: Path) -> None:
    farm = Farm(config(6, 3, backend="docker"), make_policy("oracle"), run_dir=tmp_path / "run")
    trajs = await collect(farm)
    assert len(trajs) == 6 and all(t.status == "completed" and t.reward == 1.0 for t in trajs)
