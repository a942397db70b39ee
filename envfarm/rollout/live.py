"""RUN/live.json: what a running farm is doing now, rewritten atomically about once a second.

Everything durable (finished episodes, rewards, infra errors) is in spool.jsonl; live.json only adds what
the spool cannot know while the farm runs, for ``envfarm dashboard`` and any other reader:

    {"schema": 1, "run_id": "3f2a9c1b0d4e", "pid": 4242, "time": 1764450000.5, "state": "running",
     "started_at": 1764449990.1, "wall_s": 10.4, "total": 1000, "done": 412, "done_before": 0,
     "active": 64, "max_active": 64, "steps": 980, "steps_per_s": 96.2, "interrupted": 0,
     "paused": null, "stopped": null,
     "pool": {"size": 32, "max_live": 112, "idle": 30, "leased": 64, "starting": 2, "live": 98, ...},
     "time_s": {"sandbox": 12.1, "policy": 40.2, "env": 80.3, "queue": 0.0, "total": 140.9},
     "nodes": null}                                      # a farm on Ray: one entry per node

``state`` is ``starting`` (setting up the pool and the policy), ``running``, then ``finished`` or
``stopped`` (the last write, when the farm ends). ``time_s`` sums the finished episodes' timings and the
time spent so far by the episodes in flight. A reader should treat a ``running`` file whose ``time`` is
many seconds old as a farm that died without its last write. The farm hooks in with one line::

    await stack.enter_async_context(LiveFile(self))   # Farm._produce
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from .runs import RunDir, RunSpec
from .summary import Live, Tally

log = logging.getLogger(__name__)

LIVE_FILE = "live.json"
INTERVAL_S = 1.0
SCHEMA = 1


class LiveSource(Protocol):
    """What live.json reads of a farm (``Farm`` and ``RayFarm`` have it; this module imports neither). Its
    episodes in flight (``_inflight``), pool (``_pool``), set-up flag and Ray nodes are read when present."""

    live: Live
    tally: Tally
    spec: RunSpec
    run_dir: RunDir | None
    stopped: str | None


@dataclass(frozen=True)
class PoolState:
    """The shared sandbox pool (see ``SandboxPool.stats``)."""

    size: int
    """Warm sandboxes the pool keeps ready."""
    max_live: int | None
    idle: int
    leased: int
    starting: int
    live: int
    started_total: int
    failed_total: int
    leases_total: int
    expired_total: int


@dataclass(frozen=True)
class LiveStatus:
    """One snapshot of live.json (see the module docstring)."""

    run_id: str
    pid: int
    time: float
    """Unix time of this snapshot."""
    state: str
    started_at: float
    wall_s: float
    total: int
    done: int
    """Finished episodes (any status), earlier invocations included."""
    done_before: int
    active: int
    max_active: int
    steps: int
    """Env steps taken by this invocation."""
    steps_per_s: float
    interrupted: int
    paused: str | None
    stopped: str | None
    pool: PoolState | None
    """The shared sandbox pool of this process (None for a farm on Ray: each node's worker has its own)."""
    time_s: dict[str, float]
    nodes: list[dict[str, Any]] | None = None
    """Ray farm: one entry per node (``NodeStats.to_dict``: slots, episodes, steps, requeued, lost)."""

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, **asdict(self)}


def snapshot(farm: LiveSource, state: str) -> LiveStatus:
    """The farm's live state now (reads counters only; no I/O)."""
    live, tally = farm.live, farm.tally
    time_s = {"sandbox": tally.sandbox_s, "policy": tally.policy_s, "env": tally.env_s,
              "queue": tally.queue_s, "total": tally.total_s}
    now_mono = time.monotonic()
    for ep in list(getattr(farm, "_inflight", {}).values()):  # episodes in flight: their time so far
        time_s["sandbox"] += ep.sandbox_s
        time_s["policy"] += ep.policy_s
        time_s["env"] += ep.env_s
        time_s["queue"] += ep.queue_s
        time_s["total"] += now_mono - ep.t0
    pool = getattr(farm, "_pool", None)
    pool_state = None
    if pool is not None:
        pool_state = PoolState(size=pool.size, max_live=pool.max_live, **asdict(pool.stats()))
    wall = live.wall_s()
    return LiveStatus(
        run_id=farm.spec.run_id, pid=os.getpid(), time=time.time(), state=state,
        started_at=time.time() - wall, wall_s=round(wall, 3), total=live.total or farm.spec.episodes,
        done=tally.finished, done_before=live.done_before, active=live.active, max_active=live.max_active,
        steps=live.steps, steps_per_s=round(live.steps_per_s(), 2), interrupted=live.interrupted,
        paused=live.paused, stopped=farm.stopped, pool=pool_state,
        time_s={k: round(v, 4) for k, v in time_s.items()},
        nodes=[n.to_dict() for n in getattr(farm, "nodes", ())] or None)


def write_live(path: Path, status: LiveStatus) -> None:
    """Write ``status`` to ``path`` atomically (a temp file, then rename). Blocking."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(status.to_dict(), default=str) + "\n")
    tmp.replace(path)


def read_live(path: Path) -> dict[str, Any] | None:
    """The live.json in run folder ``path`` as a dict, or None when there is none (or it is unreadable)."""
    try:
        data = json.loads((Path(path) / LIVE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class LiveFile:
    """``async with LiveFile(farm):`` rewrites RUN/live.json every ``interval_s`` while the farm works.

    Writes nothing while the farm has no run folder; the last write (state finished or stopped) happens on
    exit, even when the farm is being cancelled. A failed write is logged once and never stops the farm."""

    def __init__(self, farm: LiveSource, interval_s: float = INTERVAL_S) -> None:
        self.farm = farm
        self.interval_s = interval_s
        self._task: asyncio.Task[None] | None = None
        self._warned = False

    async def __aenter__(self) -> LiveFile:
        self._task = asyncio.create_task(self._loop(), name="envfarm live.json")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(self._task)
        state = "finished" if self.farm.stopped is None and exc[0] is None else "stopped"
        await asyncio.shield(self._write(state))

    async def _loop(self) -> None:
        while True:
            await self._write("starting" if getattr(self.farm, "_setting_up", False) else "running")
            await asyncio.sleep(self.interval_s)

    async def _write(self, state: str) -> None:
        run_dir = self.farm.run_dir
        if run_dir is None:
            return
        try:
            await asyncio.to_thread(write_live, run_dir.path / LIVE_FILE, snapshot(self.farm, state))
        except OSError as e:
            if not self._warned:
                self._warned = True
                log.warning("cannot write %s (%s); the dashboard shows no live state for this run",
                            run_dir.path / LIVE_FILE, e)


__all__ = ["LIVE_FILE", "LiveFile", "LiveSource", "LiveStatus", "PoolState", "read_live", "snapshot",
           "write_live"]
