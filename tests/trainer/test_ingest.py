"""The learner's ingest endpoint over real HTTP with the farm's own sink: dedup, groups, broken episodes
not scored, restart from a checkpoint cursor."""

from __future__ import annotations

from pathlib import Path

import pytest
from learner_support import trajectory

from envfarm.rollout.sinks import HTTPSink
from envfarm.trainer.ingest import Inbox
from envfarm.trainer.samples import rl_samples


def _lines(*trajs: object) -> list[bytes]:
    return [t.to_json().encode() for t in trajs]  # type: ignore[attr-defined]


async def test_duplicates_are_dropped_and_groups_complete_over_http(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "ingest.jsonl", group_size=3, weight_version=2)
    sink = HTTPSink(await inbox.start())
    try:
        a = [trajectory(0, 5, 1.0), trajectory(1, 5, 0.0), trajectory(2, 5, 0.0, status="infra_error")]
        b = [trajectory(3, 6, 1.0), trajectory(4, 6, 1.0)]
        await sink.send(_lines(a[0], a[1], b[0]))
        await sink.send(_lines(a[0], a[1], a[2], b[1]))  # a retried batch: two duplicates
        assert (sink.accepted, sink.duplicates, sink.weight_version) == (5, 2, 2)
        assert inbox.ready == 1 and inbox.counts["infra_error"] == 1
        (group,) = await inbox.take(1, timeout=5)
        assert [t.index for t in group] == [0, 1, 2]
        samples, counts = rl_samples([group])
        assert counts["not_completed"] == 1  # the infra error is dropped, not scored as 0
        assert sorted(s.advantage for s in samples) == pytest.approx([-1.0, 1.0], abs=1e-5)
        inbox.weight_version = 3
        assert await sink.refresh_version() == 3
    finally:
        await sink.aclose()
        await inbox.aclose()


async def test_a_restarted_inbox_requeues_what_the_checkpoint_had_not_taken(tmp_path: Path) -> None:
    store = tmp_path / "ingest.jsonl"
    inbox = Inbox(store, group_size=2)
    sink = HTTPSink(await inbox.start())
    await sink.send(_lines(trajectory(0, 1, 1.0), trajectory(1, 1, 0.0), trajectory(2, 2, 1.0)))
    taken = await inbox.take(1, timeout=5)
    cursor = inbox.cursor()  # what a checkpoint stores: group 1 taken, seed 2 half-way
    await sink.send(_lines(trajectory(3, 3, 1.0)))  # arrives after the checkpoint, then the learner dies
    await sink.aclose()
    await inbox.aclose()

    again = Inbox(store, group_size=2)
    sink = HTTPSink(await again.start(cursor=cursor))
    try:
        await sink.send(_lines(trajectory(0, 1, 1.0), trajectory(3, 3, 1.0)))  # the farm re-sends
        assert sink.duplicates == 2
        await sink.send(_lines(trajectory(4, 2, 0.0), trajectory(5, 3, 0.0)))
        groups = await again.take(2, timeout=5)
        assert sorted(t.seed for g in groups for t in g) == [2, 2, 3, 3]
        assert not {t.episode_id for t in taken[0]} & {t.episode_id for g in groups for t in g}
    finally:
        await sink.aclose()
        await again.aclose()
