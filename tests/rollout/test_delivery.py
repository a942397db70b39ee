"""The spool, the sinks and the receiver: durable, at-least-once, deduped (no sandbox needed)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest
from rollout_support import read_jsonl

from envfarm.rollout.receiver import Receiver
from envfarm.rollout.sinks import Delivery, FileSink, HTTPSink
from envfarm.rollout.spool import Spool


def line(i: int, version: int | None = None) -> str:
    return json.dumps({"episode_id": f"run:{i:06d}", "index": i, "weight_version": version})


async def test_spool_group_commits_and_repairs_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "spool.jsonl"
    spool = Spool(path)
    await spool.open()
    await asyncio.gather(*(spool.append(line(i)) for i in range(50)))
    assert spool.count == 50 and spool.size == path.stat().st_size
    lines, offset = await spool.read(0, max_records=20)
    assert len(lines) == 20 and json.loads(lines[-1])["index"] == 19
    rest, end = await spool.read(offset, max_records=1000)
    assert len(rest) == 30 and end == spool.size
    await spool.aclose()
    with path.open("ab") as f:
        f.write(b'{"episode_id": "torn')  # a crash mid-write
    again = Spool(path)
    await again.open()
    assert again.count == 50 and path.read_bytes().endswith(b"}\n")
    await again.aclose()
    with pytest.raises(Exception, match="not open"):
        await again.append(line(99))


async def test_file_sink_writes_each_episode_once(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    sink = FileSink(out)
    await sink.open()
    await sink.send([line(i).encode() for i in range(3)])
    again = FileSink(out)  # as after a crash between the write and the cursor update
    await again.open()
    await again.send([line(i).encode() for i in range(5)])
    assert [r["index"] for r in read_jsonl(out)] == [0, 1, 2, 3, 4]


async def test_file_sink_writes_lines_again_after_a_failed_write(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out.jsonl"
    sink = FileSink(out)
    await sink.open()
    real, calls = FileSink._append, []

    def full_once(self: FileSink, data: bytes) -> None:
        calls.append(data)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        real(self, data)

    monkeypatch.setattr(FileSink, "_append", full_once)
    batch = [line(i).encode() for i in range(3)]
    with pytest.raises(OSError, match="No space"):
        await sink.send(batch)
    await sink.send(batch)  # what Delivery does after a failure
    assert [r["index"] for r in read_jsonl(out)] == [0, 1, 2]


async def test_receiver_dedups_across_restarts(tmp_path: Path) -> None:
    store = tmp_path / "received.jsonl"
    body = "".join(line(i) + "\n" for i in (0, 1, 1, 2)).encode()
    for expected in ({"accepted": 3, "duplicates": 1}, {"accepted": 0, "duplicates": 4}):
        receiver = Receiver(store, weight_version=7)
        url = await receiver.start()
        try:
            async with aiohttp.ClientSession() as http, http.post(url + "/trajectories", data=body) as r:
                ack = await r.json()
            assert {k: ack[k] for k in expected} == expected and ack["weight_version"] == 7
        finally:
            await receiver.aclose()
    assert len(read_jsonl(store)) == 3


async def test_receiver_drops_stale_and_sets_its_version() -> None:
    receiver = Receiver(weight_version=10, max_staleness=2)
    url = await receiver.start()
    try:
        async with aiohttp.ClientSession() as http:
            body = (line(0, version=9) + "\n" + line(1, version=7) + "\n").encode()
            async with http.post(url + "/trajectories", data=body) as r:
                assert (await r.json())["stale"] == 1
            async with http.put(url + "/version", json={"weight_version": 11}) as r:
                assert (await r.json())["weight_version"] == 11
            async with http.post(url + "/trajectories", data=b"not json\n") as r:
                assert r.status == 400
        assert [x["index"] for x in receiver.records()] == [0]
    finally:
        await receiver.aclose()


async def test_delivery_survives_a_receiver_outage(tmp_path: Path) -> None:
    """Lines spooled while the receiver is down arrive once it is back; the cursor makes them arrive once."""
    spool = Spool(tmp_path / "spool.jsonl")
    await spool.open()
    receiver = Receiver(tmp_path / "received.jsonl")
    url = await receiver.start()
    port = int(url.rsplit(":", 1)[1])
    sink = HTTPSink(url, max_backlog=8, backoff_s=0.02, backoff_max_s=0.1)
    delivery = Delivery(spool, sink, tmp_path / "cursors", batch_records=4)
    await delivery.open()
    draining = asyncio.Event()
    task = asyncio.create_task(delivery.run(draining))
    try:
        for i in range(6):
            await spool.append(line(i))
        await asyncio.wait_for(_until(lambda: delivery.backlog == 0), 5)
        await receiver.aclose()
        for i in range(6, 20):
            await spool.append(line(i))
        await asyncio.wait_for(_until(lambda: delivery.failures >= 2), 5)
        assert delivery.full and delivery.stalled_for() > 0
        receiver = Receiver(tmp_path / "received.jsonl")
        await receiver.start(port=port)
        draining.set()
        await asyncio.wait_for(task, 10)
    finally:
        task.cancel()
        await asyncio.wait([task])
        await receiver.aclose()
        await sink.aclose()
        await spool.aclose()
    got = [r["index"] for r in read_jsonl(tmp_path / "received.jsonl")]
    assert sorted(got) == list(range(20)) and len(got) == len(set(got))
    assert json.loads((tmp_path / "cursors" / "learner.json").read_text())["count"] == 20


async def _until(predicate: object) -> None:
    while not predicate():  # type: ignore[operator]  # noqa: ASYNC110 - polling plain attributes
        await asyncio.sleep(0.01)
