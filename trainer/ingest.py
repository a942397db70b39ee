"""The learner's ingest endpoint: the farm's :class:`Receiver` (NDJSON, dedup by ``episode_id``, a durable
store) plus GRPO group assembly.

    inbox = Inbox(store=DIR / "ingest.jsonl", group_size=8)
    url = await inbox.start()                       # the farm's --learner URL
    groups = await inbox.take(16)                   # 16 complete groups (all 8 attempts at a task arrived)
    inbox.weight_version = 3                        # what GET /version and every ack report to the farm
    cursor = inbox.cursor()                         # JSON-ready; saved in each checkpoint
    ...
    inbox = Inbox(...); await inbox.start(cursor=cursor)   # after a crash: the untaken records come back

Every accepted trajectory is appended (fsync'd) to the store before the farm is told so, and the farm
re-sends from its spool whatever it was not told: nothing is lost and nothing is taken twice. A group is
complete when ``group_size`` trajectories of the same run and seed have arrived, whatever their status
(broken ones are dropped later, in ``rl_samples``, and counted there). Staleness is judged per turn when
samples are built, not here: a group must stay whole to be complete.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter, deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envfarm.errors import TrainerError
from envfarm.rollout.receiver import Receiver
from envfarm.rollout.trajectory import Trajectory

from .samples import group_key

log = logging.getLogger(__name__)

GroupKey = tuple[str, int]


class Inbox:
    """See the module docstring."""

    def __init__(self, store: Path, group_size: int, weight_version: int = 0) -> None:
        if group_size < 1:
            raise TrainerError(f"group_size must be >= 1, got {group_size}")
        self.store = Path(store)
        self.group_size = group_size
        self.receiver = Receiver(store=self.store, weight_version=weight_version, on_accept=self._accept)
        self.counts: Counter[str] = Counter()
        self.store_lines = 0
        self._partial: dict[GroupKey, list[Trajectory]] = {}
        self._ready: deque[list[Trajectory]] = deque()
        self._changed = asyncio.Event()
        self.url = ""

    @property
    def weight_version(self) -> Any:
        return self.receiver.weight_version

    @weight_version.setter
    def weight_version(self, version: int) -> None:
        self.receiver.weight_version = version

    @property
    def ready(self) -> int:
        """Complete groups waiting to be taken."""
        return len(self._ready)

    async def start(self, host: str = "127.0.0.1", port: int = 0,
                    cursor: Mapping[str, Any] | None = None) -> str:
        """Listen; with ``cursor`` (from a checkpoint) first re-queue the stored records not yet taken."""
        records = await asyncio.to_thread(_read_store, self.store)
        self.store_lines = len(records)
        if cursor is not None:
            start = int(cursor.get("store_lines", 0))
            pending = set(cursor.get("pending", ()))
            again = [r for i, r in enumerate(records) if i >= start or r["episode_id"] in pending]
            for record in again:
                self._add(record)
            log.info("ingest: %d stored trajectories re-queued (%d complete groups)", len(again), self.ready)
        self.url = await self.receiver.start(host, port)
        return self.url

    async def aclose(self) -> None:
        await self.receiver.aclose()

    async def take(self, groups: int, timeout: float | None = None) -> list[list[Trajectory]]:
        """The next ``groups`` complete groups, in the order they completed (waits for them)."""
        async with asyncio.timeout(timeout):
            while len(self._ready) < groups:
                self._changed.clear()
                await self._changed.wait()
        return [self._ready.popleft() for _ in range(groups)]

    def take_ready(self, limit: int | None = None) -> list[list[Trajectory]]:
        """The complete groups waiting now (at most ``limit``), without waiting."""
        n = len(self._ready) if limit is None else min(limit, len(self._ready))
        return [self._ready.popleft() for _ in range(n)]

    def cursor(self) -> dict[str, Any]:
        """Where the learner is in the store: records from ``store_lines`` on, and those of the groups not
        taken yet, come back on a restart."""
        pending = [t.episode_id for g in [*self._ready, *self._partial.values()] for t in g]
        return {"store_lines": self.store_lines, "pending": pending}

    def _accept(self, record: dict[str, Any]) -> None:
        self.store_lines += 1
        self._add(record)

    def _add(self, record: Mapping[str, Any]) -> None:
        try:
            traj = Trajectory.from_dict(record)
        except (ValueError, TypeError, KeyError) as e:
            self.counts["unreadable"] += 1
            log.warning("ingest: trajectory %r is unreadable (%s); skipped", record.get("episode_id"), e)
            return
        self.counts[traj.status] += 1
        key = group_key(traj)
        group = self._partial.setdefault(key, [])
        group.append(traj)
        if len(group) >= self.group_size:
            del self._partial[key]
            self._ready.append(sorted(group, key=lambda t: t.index))
            self._changed.set()


def _read_store(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    with path.open("rb") as f:
        for line in f:
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:  # a torn last line: the receiver repairs it on start
                    break
    return out


__all__ = ["Inbox"]
