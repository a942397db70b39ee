"""Sinks: where trajectories go, each fed from the durable spool by a :class:`Delivery`.

    FileSink(Path("rollouts.jsonl"))      # --out: JSONL, one trajectory per line, deduped on resume
    HTTPSink("http://127.0.0.1:8100")     # --learner: NDJSON POSTs to URL/trajectories

A :class:`Delivery` tails the spool from the sink's saved cursor, hands batches to ``sink.send`` and moves the
cursor only after the sink acknowledged them: a crash or a restarted learner loses nothing and may see a
batch twice (at-least-once; receivers dedup on ``episode_id``). A failing sink is retried with backoff for
as long as the run lasts. ``sink.max_backlog`` bounds the records spooled but not yet acknowledged: the farm
starts no new episode while it is reached, so a slow learner slows the farm down (backpressure) instead of
letting the backlog grow without end.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import aiohttp

from envfarm.errors import ConfigError, RolloutError, tail

from .openai_policy import check_http_url, parse_version
from .spool import Cursor, Spool, repair_jsonl
from .trajectory import WeightVersion

log = logging.getLogger(__name__)

NDJSON = "application/x-ndjson"


class SinkError(RolloutError):
    """One delivery attempt failed; the Delivery retries it."""


class Sink(ABC):
    """A destination for spooled trajectory lines. ``send`` must be safe to repeat (at-least-once)."""

    name: str = "sink"
    """Names the cursor file: unique per run folder."""
    max_backlog: int | None = None
    """Spooled but unacknowledged records beyond which the farm waits (None: no bound)."""
    weight_version: WeightVersion = None
    """The receiving learner's weight version, when it reports one."""
    backoff_s: float = 0.2
    """First delay before a failed delivery is retried; doubled per failure up to ``backoff_max_s``."""
    backoff_max_s: float = 5.0

    async def open(self) -> None:
        """Prepare (create files, connect)."""

    @abstractmethod
    async def send(self, lines: list[bytes]) -> None:
        """Deliver ``lines`` (JSON, no newline) or raise SinkError / OSError to have them retried."""

    async def refresh_version(self) -> WeightVersion:
        return self.weight_version

    async def aclose(self) -> None:
        """Release resources. Idempotent."""


class FileSink(Sink):
    """Appends to a JSONL file. On open it drops a torn last line and remembers the episode ids already
    there, so a line re-sent after a crash is written once."""

    def __init__(self, path: Path, fsync: bool = False) -> None:
        self.path = Path(path)
        self.name = "file"
        self.fsync = fsync
        self._seen: set[str] = set()

    async def open(self) -> None:
        self._seen = await asyncio.to_thread(self._load)

    def _load(self) -> set[str]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        repair_jsonl(self.path)
        self.path.touch()
        with self.path.open("rb") as f:
            return {json.loads(line)["episode_id"] for line in f if line.strip()}

    async def send(self, lines: list[bytes]) -> None:
        fresh: dict[str, bytes] = {}
        for line in lines:
            eid = json.loads(line)["episode_id"]
            if eid not in self._seen:
                fresh.setdefault(eid, line)
        if fresh:
            await asyncio.to_thread(self._append, b"".join(x + b"\n" for x in fresh.values()))
        self._seen.update(fresh)  # only once written: a failed write is retried with the same lines

    def _append(self, data: bytes) -> None:
        with self.path.open("ab") as f:
            f.write(data)
            f.flush()
            if self.fsync:
                os.fsync(f.fileno())


class HTTPSink(Sink):
    """POSTs NDJSON batches to ``URL/trajectories``; the receiver answers ``{"accepted", "duplicates",
    "weight_version"}`` (see receiver.py). ``GET URL/version`` reports the learner's weight version."""

    def __init__(self, url: str, max_backlog: int = 256, timeout_s: float = 30.0, backoff_s: float = 0.2,
                 backoff_max_s: float = 5.0) -> None:
        check_http_url(url, "learner URL", "--learner http://127.0.0.1:8100")
        if max_backlog < 1:
            raise ConfigError(f"learner max_backlog must be >= 1, got {max_backlog}")
        self.url = url.rstrip("/")
        self.name = "learner"
        self.max_backlog = max_backlog
        self.timeout_s = timeout_s
        self.backoff_s, self.backoff_max_s = backoff_s, backoff_max_s
        self.accepted = 0
        self.duplicates = 0
        self._session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=4))

    async def send(self, lines: list[bytes]) -> None:
        body = b"".join(x + b"\n" for x in lines)
        ack = await self._call("POST", "/trajectories", data=body, headers={"Content-Type": NDJSON})
        self.accepted += int(ack.get("accepted", 0))
        self.duplicates += int(ack.get("duplicates", 0))

    async def refresh_version(self) -> WeightVersion:
        await self._call("GET", "/version")
        return self.weight_version

    async def _call(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        if self._session is None:
            await self.open()
        assert self._session is not None
        try:
            request = self._session.request(method, self.url + path, **kw)
            async with asyncio.timeout(self.timeout_s), request as r:
                text = await r.text()
                if r.status != 200:
                    raise SinkError(f"learner {self.url}{path}: HTTP {r.status}: {tail(text, chars=300)}")
        except (aiohttp.ClientError, TimeoutError) as e:
            raise SinkError(f"learner {self.url}{path}: {type(e).__name__}: {e}") from e
        try:
            ack = json.loads(text)
        except json.JSONDecodeError as e:
            raise SinkError(f"learner {self.url}{path} answered non-JSON: {tail(text, chars=300)}") from e
        if isinstance(ack, dict) and ack.get("weight_version") is not None:
            self.weight_version = parse_version(ack["weight_version"])
        return ack if isinstance(ack, dict) else {}

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await asyncio.shield(session.close())


class Delivery:
    """Feeds one sink from the spool (see the module docstring)."""

    def __init__(self, spool: Spool, sink: Sink, cursor_dir: Path, batch_records: int = 64) -> None:
        self.spool = spool
        self.sink = sink
        self.cursor = Cursor(Path(cursor_dir) / f"{sink.name}.json")
        self.batch_records = batch_records
        self.failures = 0
        """Consecutive failed attempts (0 while healthy)."""
        self.stalled_since: float | None = None
        """Monotonic time of the first failure since the last success."""
        self.last_error = ""
        self.error: Exception | None = None
        """What ended the feeding when the sink failed with more than a delivery failure (see run)."""
        self.acked_changed = asyncio.Event()

    @property
    def backlog(self) -> int:
        """Records in the spool the sink has not acknowledged."""
        return self.spool.count - self.cursor.count

    @property
    def full(self) -> bool:
        return self.sink.max_backlog is not None and self.backlog >= self.sink.max_backlog

    async def open(self) -> None:
        await self.cursor.load()
        if self.cursor.offset > self.spool.size:
            raise ConfigError(f"{self.cursor.path} points past the end of {self.spool.path}; the run folder "
                              "was edited by hand. Delete the cursor file to resend everything")
        await self.sink.open()

    @property
    def dead(self) -> bool:
        """The sink raised something other than a delivery failure (a bug in it): it is fed no more."""
        return self.error is not None

    async def run(self, draining: asyncio.Event) -> None:
        """Deliver until ``draining`` is set and nothing is left, lines still queued for the spool included;
        cancel to stop at once. Never raises: an error that is no delivery failure ends the feeding and is
        kept in :attr:`error` (the farm stops the run on it; the spool keeps the sink's share)."""
        try:
            await self._feed(draining)
        except Exception as e:  # a bug in the sink (SinkError and OSError are retried in _deliver)
            self.error = e
            self.last_error = f"{type(e).__name__}: {e}"
            log.error("sink %s failed: %s; it is fed no more, its trajectories stay in %s", self.sink.name,
                      self.last_error, self.spool.path)

    async def _feed(self, draining: asyncio.Event) -> None:
        while True:
            lines, offset = await self.spool.read(self.cursor.offset, self.batch_records)
            if lines:
                await self._deliver(lines, offset)
            elif not draining.is_set():
                await _first(self.spool.wait_beyond(self.cursor.offset), draining.wait())
            else:
                await self.spool.flush()  # an appender cancelled by the stop left its line queued
                if self.spool.size <= self.cursor.offset:
                    return

    async def _deliver(self, lines: list[bytes], offset: int) -> None:
        while True:
            try:
                await self.sink.send(lines)
                break
            except (SinkError, OSError) as e:
                self._failed(e)
                cap = min(self.sink.backoff_max_s, self.sink.backoff_s * 2 ** min(self.failures, 16))
                await asyncio.sleep(random.uniform(cap / 2, cap))
        if self.failures:
            log.warning("sink %s recovered after %d failed attempts", self.sink.name, self.failures)
        self.failures, self.stalled_since = 0, None
        await self.cursor.save(offset, self.cursor.count + len(lines))
        self.acked_changed.set()
        self.acked_changed = asyncio.Event()

    def _failed(self, e: BaseException) -> None:
        self.failures += 1
        self.last_error = str(e)
        if self.stalled_since is None:
            self.stalled_since = time.monotonic()
            log.warning("sink %s: delivery failed (%s); retrying with backoff, the spool keeps everything",
                        self.sink.name, e)

    def stalled_for(self) -> float:
        return 0.0 if self.stalled_since is None else time.monotonic() - self.stalled_since


async def finish_feeding(feeders: list[asyncio.Task[None]], timeout_s: float) -> None:
    """Wait for the :meth:`Delivery.run` tasks ``feeders`` (their draining event set) for at most
    ``timeout_s``, then cancel those still running: their sinks' backlog stays in the spool."""
    if not feeders:
        return
    try:
        _, late = await asyncio.wait(feeders, timeout=timeout_s)
    finally:
        for task in feeders:
            task.cancel()
        await asyncio.shield(asyncio.wait(feeders))
    for task in late:
        log.warning("%s: its backlog was not delivered within %.0fs; it stays in the spool", task.get_name(),
                    timeout_s)


async def _first(*coros: Any) -> None:
    """Wait until the first of ``coros`` finishes; cancel and await the rest."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.wait(tasks)


__all__ = ["Delivery", "FileSink", "HTTPSink", "Sink", "SinkError", "finish_feeding"]
