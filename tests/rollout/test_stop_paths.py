"""Every way a run stops delivers every completed trajectory to every healthy sink, on real bwrap sandboxes.

The disk is made slow (``slow_disk``: each spool commit waits 0.3 s before its write, as an fsync does on a
machine busy with image builds), so that a stop always finds lines still queued for the spool: the state in
which a run used to hand a healthy sink fewer trajectories than it completed. A sink that is itself down
keeps its share in the run's spool, and ``deliver_run`` (``envfarm farm deliver RUN``) hands it over once
the sink is back.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
from rollout_support import StubServer, free_port, read_jsonl

from envfarm.errors import LearnerUnavailable, PolicyUnavailable, SinkFailed
from envfarm.rollout import (
    Farm,
    FarmConfig,
    FileSink,
    HTTPSink,
    OpenAIPolicy,
    OraclePolicy,
    Receiver,
    Sink,
    Trajectory,
)
from envfarm.rollout.deliver import deliver_run

pytestmark = [pytest.mark.bwrap, pytest.mark.usefixtures("slow_disk")]

def config(episodes: int, concurrency: int, **kw: Any) -> FarmConfig:
    return FarmConfig(env_id="envfarm/ToolCalc-v0", episodes=episodes, concurrency=concurrency,
                      backend="bwrap", **kw)


def completed_ids(run: Path) -> set[str]:
    """Episode ids of the finished trajectories in the run's spool (what the summary counts)."""
    return {x["episode_id"] for x in read_jsonl(run / "spool.jsonl")}


def assert_delivered(farm: Farm, run: Path, out: Path, got: list[Trajectory]) -> None:
    """The healthy file sink and run()'s caller (``got``) hold exactly the finished episodes, each once."""
    assert sorted(t.episode_id for t in got) == sorted(completed_ids(run))
    s = farm.summary()
    ids = [x["episode_id"] for x in read_jsonl(out)]
    assert len(ids) == len(set(ids)) == s.episodes_completed + s.episodes_failed, s.sinks
    assert set(ids) == completed_ids(run)
    assert s.sinks["file"]["backlog"] == 0 and s.sinks["file"]["delivered"] == len(ids)


async def test_policy_outage(stub: StubServer, tmp_path: Path) -> None:
    run, out = tmp_path / "run", tmp_path / "out.jsonl"
    policy = OpenAIPolicy(stub.url, max_retries=1, backoff_s=0.01, backoff_max_s=0.02, timeout_s=2)
    farm = Farm(config(40, 6), policy, run_dir=run, sinks=[FileSink(out)])
    got: list[Trajectory] = []
    with pytest.raises(PolicyUnavailable):
        async for t in farm.run():
            got.append(t)
            if len(got) == 3:
                await stub.stop()
    assert farm.summary().episodes_completed >= 3
    assert_delivered(farm, run, out, got)
    assert farm.summary().undelivered is None


@pytest.mark.parametrize("cancel", [False, True], ids=["drain", "cancel"])
async def test_stop(cancel: bool, stub: StubServer, tmp_path: Path) -> None:
    """stop() is what Ctrl-C / SIGTERM call in the CLI (a second press cancels the episodes in flight). A
    slow model (0.5 s a call, beside the 0.3 s commits) keeps episodes in flight when the stop comes."""
    stub.delay_s = 0.5
    run, out = tmp_path / "run", tmp_path / "out.jsonl"
    farm = Farm(config(40, 6), OpenAIPolicy(stub.url, timeout_s=5), run_dir=run, sinks=[FileSink(out)])
    got: list[Trajectory] = []
    async for t in farm.run():
        got.append(t)
        if len(got) == 3:
            farm.stop(cancel=cancel)
    s = farm.summary()
    assert s.stopped == "interrupted" and 3 <= s.episodes_completed < 40
    assert (s.episodes_interrupted > 0) == cancel
    assert_delivered(farm, run, out, got)


async def test_learner_outage_keeps_its_share_in_the_spool(tmp_path: Path) -> None:
    run, out, store = tmp_path / "run", tmp_path / "out.jsonl", tmp_path / "received.jsonl"
    port = free_port()
    receiver = Receiver(store)
    await receiver.start(port=port)
    learner = HTTPSink(f"http://127.0.0.1:{port}", max_backlog=4, backoff_s=0.05, backoff_max_s=0.2)
    farm = Farm(config(60, 4, learner_timeout_s=1.0, flush_timeout_s=2.0), OraclePolicy(), run_dir=run,
                sinks=[learner, FileSink(out)])
    got: list[Trajectory] = []
    with pytest.raises(LearnerUnavailable) as caught:
        async for t in farm.run():
            got.append(t)
            if len(got) == 3:
                await receiver.aclose()  # down for good: the run stops once the backlog waits too long
    assert_delivered(farm, run, out, got)
    s = farm.summary()
    waiting = s.sinks["learner"]["backlog"]
    assert waiting > 0 and s.sinks["learner"]["delivered"] + waiting == s.episodes_completed
    assert s.undelivered is not None and s.undelivered.sinks == {"learner": waiting}
    message = str(caught.value)
    assert f"{waiting} trajectories" in message and str(run / "spool.jsonl") in message
    assert f"envfarm farm deliver {run}" in message

    receiver = Receiver(store)  # the learner is back: the documented command delivers the rest
    await receiver.start(port=port)
    try:
        counts = await deliver_run(run, timeout_s=30)
    finally:
        await receiver.aclose()
    assert counts["learner"].backlog == 0 and counts["file"].backlog == 0
    assert {x["episode_id"] for x in read_jsonl(store)} == completed_ids(run)


class BuggySink(Sink):
    """A sink with a bug: its third batch raises an error that is no delivery failure."""

    name = "buggy"

    def __init__(self) -> None:
        self.batches = 0
        self.lines: list[bytes] = []

    async def send(self, lines: list[bytes]) -> None:
        self.batches += 1
        if self.batches == 3:
            raise KeyError("a bug in the sink")
        self.lines.extend(lines)


async def test_an_exception_in_a_sink_stops_the_run_and_the_others_drain(tmp_path: Path) -> None:
    run, out = tmp_path / "run", tmp_path / "out.jsonl"
    buggy = BuggySink()
    farm = Farm(config(60, 4), OraclePolicy(), run_dir=run, sinks=[buggy, FileSink(out)])
    got: list[Trajectory] = []
    with pytest.raises(SinkFailed, match=r"sink buggy failed: KeyError: 'a bug in the sink'") as caught:
        async for t in farm.run():
            got.append(t)
            await asyncio.sleep(0.05)  # one trajectory per batch of the buggy sink
    assert_delivered(farm, run, out, got)
    s = farm.summary()
    assert s.undelivered is not None and s.undelivered.sinks["buggy"] == s.sinks["buggy"]["backlog"] > 0
    assert "envfarm farm deliver" in str(caught.value)
    fixed = BuggySink()
    fixed.batches = 10
    counts = await deliver_run(run, sinks=[fixed], timeout_s=30)  # the fixed sink takes up its cursor
    assert counts["buggy"].backlog == 0
    got = {Trajectory.from_json(x.decode()).episode_id for x in buggy.lines + fixed.lines}
    assert got == completed_ids(run)


async def test_cli_names_the_deliver_command_and_it_delivers(tmp_path: Path) -> None:
    """`farm run` with its learner down stops with exit 2 naming `envfarm farm deliver RUN`, which, once the
    learner is up, delivers the learner's share; the file sink had everything already."""
    run, out, store, port = tmp_path / "run", tmp_path / "out.jsonl", tmp_path / "received.jsonl", free_port()
    code, text = await envfarm("farm", "run", "--env", "envfarm/ToolCalc-v0", "--backend", "bwrap",
                               "--policy", "oracle", "--episodes", "20", "--concurrency", "2",
                               "--trajectories", str(out),
                               "--learner", f"http://127.0.0.1:{port}", "--learner-backlog", "2",
                               "--learner-timeout", "1", "--flush-timeout", "1", "--run-dir", str(run),
                               "--quiet")
    assert code == 2 and "error: sink learner has taken no delivery" in text and "Traceback" not in text, text
    assert f"envfarm farm deliver {run}" in " ".join(text.split()), text
    done = completed_ids(run)
    assert {x["episode_id"] for x in read_jsonl(out)} == done and len(done) >= 2

    code, text = await envfarm("farm", "deliver", str(run), "--timeout", "1")  # still down: says so
    assert code == 2 and f"learner: {len(done)} left" in text, text  # it never took one
    receiver = Receiver(store)
    await receiver.start(port=port)
    try:
        code, text = await envfarm("farm", "deliver", str(run))
    finally:
        await receiver.aclose()
    assert code == 0, text
    assert {x["episode_id"] for x in read_jsonl(store)} == done


async def envfarm(*args: str) -> tuple[int, str]:
    pipe = asyncio.subprocess
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "envfarm.cli", *args, stdout=pipe.PIPE,
                                                stderr=pipe.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode()
