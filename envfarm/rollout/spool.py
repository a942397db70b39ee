"""The durable spool: an append-only JSONL file of finished trajectories, the source every sink reads.

    spool = Spool(run_dir / "spool.jsonl")
    await spool.open()                   # repairs a torn last line left by a crash
    await spool.append(traj.to_json())   # returns once the line is on disk (fsync'd)
    await spool.flush()                  # returns once every line queued so far is on disk
    lines, offset = await spool.read(offset, max_records=64)
    await spool.aclose()

Appends are group-committed: one writer task takes every line queued since its last write, writes them with
one ``write`` + ``fsync`` in a worker thread, then wakes the appenders and the readers. A :class:`Cursor`
remembers, per sink, how far delivery got (byte offset and record count, replaced atomically), so a sink
restarted after a crash resumes where it was acknowledged: delivery is at-least-once, and receivers dedup
on ``episode_id``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from envfarm.errors import RolloutError

log = logging.getLogger(__name__)

MAX_BATCH_LINES = 4096


def repair_jsonl(path: Path) -> tuple[int, int]:
    """Cut a torn last line (a crash mid-write) off ``path``; return (size, complete lines). Blocking."""
    if not path.exists():
        return 0, 0
    with path.open("rb+") as f:
        data = f.read()
        end = data.rfind(b"\n") + 1
        if end < len(data):
            log.warning("%s: dropping a torn last line of %d bytes (a crash mid-write)", path,
                        len(data) - end)
            f.truncate(end)
            f.flush()
            os.fsync(f.fileno())
    return end, data.count(b"\n", 0, end)


def _prepare(path: Path) -> tuple[int, int]:
    path.parent.mkdir(parents=True, exist_ok=True)
    size_count = repair_jsonl(path)
    path.touch()
    return size_count


@dataclass
class _Pending:
    line: bytes
    done: asyncio.Future[None]


class Spool:
    """Append-only JSONL with group commit; see the module docstring."""

    def __init__(self, path: Path, fsync: bool = True) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self.size = 0
        """Bytes durably written (readers never look past this)."""
        self.count = 0
        """Records durably written."""
        self._queue: asyncio.Queue[_Pending | None] = asyncio.Queue()
        self._writer: asyncio.Task[None] | None = None
        self._grew = asyncio.Event()
        self._error: BaseException | None = None
        self._closed = False
        self._last: asyncio.Future[None] | None = None
        """The future of the line queued last (lines are committed in order)."""

    async def open(self) -> None:
        self.size, self.count = await asyncio.to_thread(_prepare, self.path)
        self._writer = asyncio.create_task(self._write_loop(), name=f"spool writer {self.path}")

    async def append(self, line: str) -> None:
        """Queue one JSON line (no newline inside) and wait until it is on disk."""
        if self._error is not None:
            raise RolloutError(f"spool {self.path} cannot be written: {self._error}; free disk space or fix "
                               "permissions, then resume the run") from self._error
        if self._closed or self._writer is None:
            raise RolloutError(f"spool {self.path} is not open")
        done = self._last = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Pending(line.encode() + b"\n", done))
        await asyncio.shield(done)  # a cancelled appender leaves the line queued: it is written anyway

    async def read(self, offset: int, max_records: int = 256,
                   max_bytes: int = 4 << 20) -> tuple[list[bytes], int]:
        """Complete lines from byte ``offset`` (at most ``max_records``; ``max_bytes`` unless one line is
        longer) and the offset after them."""
        end = self.size
        if offset >= end:
            return [], offset
        return await asyncio.to_thread(_read_lines, self.path, offset, end, max_records, max_bytes)

    async def flush(self) -> None:
        """Return once every line queued so far is on disk (or its write failed): what a reader that is
        about to stop must wait for, since an appender cancelled mid-append leaves its line queued."""
        last = self._last
        if last is not None and not last.done():
            await asyncio.wait([last])

    async def wait_beyond(self, offset: int) -> None:
        """Return once the spool holds more than ``offset`` bytes, or it is closed."""
        while self.size <= offset and not self._closed:
            event = self._grew
            await event.wait()

    async def aclose(self) -> None:
        """Write what is queued, stop the writer. Idempotent; completes even if the caller is cancelled."""
        if self._writer is not None and not self._closed:
            self._closed = True
            self._queue.put_nowait(None)
        if self._writer is not None:
            await asyncio.shield(asyncio.wait([self._writer]))
        self._closed = True
        self._wake_readers()

    # ------------------------------------------------------------------------------------------- writer

    async def _write_loop(self) -> None:
        while True:
            batch: list[_Pending] = []
            item = await self._queue.get()
            stop = item is None
            if item is not None:
                batch.append(item)
            while not self._queue.empty() and len(batch) < MAX_BATCH_LINES:
                nxt = self._queue.get_nowait()
                stop = stop or nxt is None
                if nxt is not None:
                    batch.append(nxt)
            if batch:
                await self._commit(batch)
            if stop and self._queue.empty():
                return

    async def _commit(self, batch: list[_Pending]) -> None:
        data = b"".join(p.line for p in batch)
        try:
            await asyncio.to_thread(self._write, data)
        except OSError as e:
            self._error = e
            log.error("spool %s: write failed: %s", self.path, e)
            for p in batch:
                if not p.done.done():
                    p.done.set_exception(RolloutError(f"spool {self.path} write failed: {e}"))
            return
        self.size += len(data)
        self.count += len(batch)
        for p in batch:
            if not p.done.done():
                p.done.set_result(None)
        self._wake_readers()

    def _write(self, data: bytes) -> None:
        with self.path.open("ab") as f:
            f.write(data)
            f.flush()
            if self.fsync:
                os.fsync(f.fileno())

    def _wake_readers(self) -> None:
        self._grew.set()
        self._grew = asyncio.Event()


def _read_lines(path: Path, offset: int, end: int, max_records: int,
                max_bytes: int) -> tuple[list[bytes], int]:
    with path.open("rb") as f:
        f.seek(offset)
        chunk = f.read(min(max_bytes, end - offset))
        while b"\n" not in chunk and offset + len(chunk) < end:  # one line longer than max_bytes
            chunk += f.read(min(max_bytes, end - offset - len(chunk)))
    lines = chunk.split(b"\n")[:-1][:max_records]  # the piece after the last newline is incomplete
    return lines, offset + sum(len(x) + 1 for x in lines)


class Cursor:
    """How far one sink's delivery got: byte offset and record count in the spool, replaced atomically."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.offset = 0
        self.count = 0

    async def load(self) -> None:
        if await asyncio.to_thread(self.path.exists):
            data = json.loads(await asyncio.to_thread(self.path.read_text))
            self.offset, self.count = int(data["offset"]), int(data["count"])

    async def save(self, offset: int, count: int) -> None:
        self.offset, self.count = offset, count
        await asyncio.to_thread(_replace, self.path, json.dumps({"offset": offset, "count": count}))


def _replace(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


__all__ = ["Cursor", "Spool", "repair_jsonl"]
