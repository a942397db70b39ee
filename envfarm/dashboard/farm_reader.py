"""A farm run folder, read incrementally: run.json, spool.jsonl (by byte offset), live.json, summary.json.

The spool is the only record of finished episodes; each refresh parses just the lines appended since the
last one and keeps a small :class:`EpisodeRow` per episode (where its line is, for opening it later).
live.json (envfarm/rollout/live.py) adds what only the running farm knows: episodes in flight, the pool,
the time split so far. Every public method is blocking and thread-safe: the server calls them in threads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from envfarm.errors import ConfigError
from envfarm.rollout.live import read_live
from envfarm.rollout.runs import read_spec
from envfarm.rollout.summary import Tally
from envfarm.rollout.trajectory import Trajectory

from .episode_view import episode_detail
from .series import time_series
from .tail import JsonlTail, Throttle, read_json

log = logging.getLogger(__name__)

REFRESH_S = 0.5
LIVE_SAMPLES = 3600
STALE_S = 5.0
"""A ``running`` live.json older than this: the farm stopped writing it (died, or was killed)."""


@dataclass(frozen=True)
class EpisodeRow:
    """What the browser's table shows of one trajectory, and where its line is in the spool."""

    index: int
    episode_id: str
    env_id: str
    task_id: str
    status: str
    reward: float
    steps: int
    weight_version: Any
    infra_error: str | None
    error: str | None
    retries: int
    started_at: float
    finished_at: float
    tools: tuple[str, ...]
    """Names of the tools called, in order."""
    offset: int
    length: int

    @classmethod
    def of(cls, t: Trajectory, offset: int, length: int) -> EpisodeRow:
        return cls(t.index, t.episode_id, t.env_id, t.task_id, t.status, t.reward, t.steps, t.weight_version,
                   t.infra_error, t.error, t.retries, t.started_at, t.started_at + t.timings.total_s,
                   tuple(turn.tool_name or "?" for turn in t.turns), offset, length)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        del out["offset"], out["length"]
        return out


@dataclass(frozen=True)
class EpisodeFilter:
    """The trajectory browser's filters (None: any)."""

    env: str | None = None
    task: str | None = None
    """A substring of the task id."""
    status: str | None = None
    infra: bool | None = None
    """True: only episodes with an infra error; False: only those without."""
    min_reward: float | None = None
    max_reward: float | None = None
    version: str | None = None
    """The weight version, as text."""

    def matches(self, r: EpisodeRow) -> bool:
        return ((self.env is None or r.env_id == self.env)
                and (self.task is None or self.task.lower() in r.task_id.lower())
                and (self.status is None or r.status == self.status)
                and (self.infra is None or (r.infra_error is not None) == self.infra)
                and (self.min_reward is None or r.reward >= self.min_reward)
                and (self.max_reward is None or r.reward <= self.max_reward)
                and (self.version is None or str(r.weight_version) == self.version))


class FarmRun:
    """One farm run folder (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.spool = JsonlTail(self.path / "spool.jsonl")
        self.interrupted = JsonlTail(self.path / "interrupted.jsonl")
        self.rows: dict[int, EpisodeRow] = {}
        self.tally = Tally()
        self.bad_lines = 0
        self.n_interrupted = 0
        self.spec: dict[str, Any] = {}
        self.live: dict[str, Any] | None = None
        self.summary: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self._throttle = Throttle(REFRESH_S)
        self._by_finish: list[EpisodeRow] | None = None
        self._by_index: list[EpisodeRow] | None = None
        self._series: tuple[tuple[Any, ...], dict[str, Any], list[str]] | None = None
        self.samples: deque[tuple[float, int, float, int, int]] = deque(maxlen=LIVE_SAMPLES)
        """(time, active, steps/s, pool leased, pool idle) from each new live.json seen while watching."""

    # -------------------------------------------------------------------------------------- reading

    def refresh(self, force: bool = False) -> None:
        """Read what changed on disk (at most every REFRESH_S unless ``force``)."""
        with self._lock:
            if not self._throttle.due(force):
                return
            if not self.spec:
                try:
                    self.spec = asdict(read_spec(self.path))
                except ConfigError as e:
                    log.warning("%s", e)
            self._read_spool()
            reset, lines = self.interrupted.read_new()
            self.n_interrupted = (0 if reset else self.n_interrupted) + len(lines)
            self.live = read_live(self.path)
            self._sample_live()
            self.summary = read_json(self.path / "summary.json")

    def _read_spool(self) -> None:
        reset, lines = self.spool.read_new()
        if reset:
            self.rows, self.tally, self.bad_lines = {}, Tally(), 0
        if reset or lines:
            self._by_finish = self._by_index = None
        for line in lines:
            try:
                t = Trajectory.from_json(line.data)
            except (ValueError, TypeError, KeyError, AttributeError) as e:
                self.bad_lines += 1
                log.debug("%s: skipping a line at byte %d (%s)", self.spool.path, line.offset, e)
                continue
            if t.index not in self.rows:
                self.tally.add(t)
            self.rows[t.index] = EpisodeRow.of(t, line.offset, line.length)

    # -------------------------------------------------------------------------------------- views

    def status(self) -> dict[str, Any]:
        """Counters, live state, pool, time split and time series: the live view's JSON."""
        self.refresh()
        with self._lock:
            t, live = self.tally, self._fresh_live()
            total = int(self.spec.get("episodes") or (live or {}).get("total") or 0)
            if self._by_finish is None:
                self._by_finish = sorted(self.rows.values(), key=lambda r: r.finished_at)
            rows = self._by_finish
            return {
                "kind": "farm", "path": str(self.path), "spec": self.spec, "state": self._state(live),
                "total": total, "done": t.finished, "completed": t.completed, "infra_errors": t.infra_errors,
                "infra_retries": t.infra_retries, "policy_errors": t.policy_errors, "errors": t.errors,
                "interrupted": self.n_interrupted, "steps": t.steps, "mean_reward": t.mean_reward,
                "versions": sorted(str(v) for v in t.versions), "bad_lines": self.bad_lines,
                "active": (live or {}).get("active", 0), "max_active": (live or {}).get("max_active"),
                "steps_per_s": self._steps_per_s(live), "paused": (live or {}).get("paused"),
                "stopped": (live or self.summary or {}).get("stopped"),
                "pool": (live or {}).get("pool"), "nodes": (live or {}).get("nodes"),
                "time_split": self._time_split(live),
                "wall_s": (live or self.summary or {}).get("wall_s"),
                "live_age_s": round(time.time() - self.live["time"], 1) if self.live else None,
                **self._series_and_envs(rows, live is not None and live.get("state") == "running"),
                "live_series": self._live_series(),
            }

    def episodes(self, flt: EpisodeFilter, offset: int = 0, limit: int = 200) -> dict[str, Any]:
        """The rows matching ``flt``, newest first, a page at a time."""
        self.refresh()
        with self._lock:
            if self._by_index is None:
                self._by_index = sorted(self.rows.values(), key=lambda r: -r.index)
            match = [r for r in self._by_index if flt.matches(r)]
            return {"total": len(self.rows), "matched": len(match),
                    "rows": [r.to_dict() for r in match[offset:offset + limit]]}

    def episode(self, index: int) -> dict[str, Any] | None:
        """One whole trajectory (read from its line in the spool) with its code-repair parts, or None."""
        self.refresh()
        with self._lock:
            row = self.rows.get(index)
            if row is None:
                return None
            data = self.spool.read_at(row.offset, row.length)
        return episode_detail(Trajectory.from_json(data))

    def _fresh_live(self) -> dict[str, Any] | None:
        live = self.live
        if live is None or live.get("run_id") not in (None, self.spec.get("run_id")):
            return None
        return live

    def _sample_live(self) -> None:
        live = self.live
        if not live or (self.samples and self.samples[-1][0] >= float(live.get("time", 0))):
            return
        pool = live.get("pool") or {}
        self.samples.append((float(live.get("time", 0)), int(live.get("active") or 0),
                             float(live.get("steps_per_s") or 0.0), int(pool.get("leased") or 0),
                             int(pool.get("idle") or 0)))

    def _live_series(self) -> dict[str, list[Any]]:
        """live.json as sampled since the dashboard started watching (seconds since the run started)."""
        t0 = float((self.live or {}).get("started_at") or (self.samples[0][0] if self.samples else 0.0))
        keys = ("t", "active", "steps_per_s", "leased", "idle")
        out: dict[str, list[Any]] = {k: [] for k in keys}
        for sample in self.samples:
            for k, v in zip(keys, sample, strict=True):
                out[k].append(round(v - t0, 2) if k == "t" else v)
        return out

    def _series_and_envs(self, rows: list[EpisodeRow], running: bool) -> dict[str, Any]:
        """Time series and env ids, recomputed when episodes arrive (and every second while running)."""
        key = (len(rows), rows[-1].finished_at if rows else 0.0, running, int(time.time()) if running else 0)
        if self._series is None or self._series[0] != key:
            self._series = (key, time_series(rows, running=running), sorted({r.env_id for r in rows}))
        return {"series": self._series[1], "envs": self._series[2]}

    def _steps_per_s(self, live: Mapping[str, Any] | None) -> float | None:
        """The recent rate while the farm runs, else the run's average (summary.json)."""
        if live is not None and live.get("state") in ("running", "starting"):
            return live.get("steps_per_s")
        return (self.summary or {}).get("steps_per_s", (live or {}).get("steps_per_s"))

    def _state(self, live: Mapping[str, Any] | None) -> str:
        if live is None:
            return "finished" if self.summary and not self.summary.get("stopped") else (
                "stopped" if self.summary else "unknown")
        state = str(live.get("state", "unknown"))
        if state in ("running", "starting") and time.time() - float(live.get("time", 0)) > STALE_S:
            return "not responding"
        return state

    def _time_split(self, live: Mapping[str, Any] | None) -> dict[str, float]:
        """Fractions of episode time: live.json's (in-flight episodes included) while it runs, else the
        finished episodes' (the same split as summary.json)."""
        parts = (live or {}).get("time_s")
        if not isinstance(parts, Mapping) or not parts.get("total"):
            return self.tally.time_split()
        total = float(parts["total"])
        out = {k: round(float(parts.get(k, 0.0)) / total, 4) for k in ("sandbox", "policy", "env", "queue")}
        out["farm"] = round(max(0.0, 1.0 - sum(out.values())), 4)
        return out


__all__ = ["EpisodeFilter", "EpisodeRow", "FarmRun"]
