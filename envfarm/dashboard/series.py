"""Time series of a farm run from its spool: episodes finished, steps/s, reward and infra errors over time.

Each episode counts at its finish time (``started_at + timings.total_s``), in at most ``MAX_POINTS``
equal buckets from the first start to the last finish (or now, while the run goes on).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

MAX_POINTS = 60
MIN_BUCKET_S = 0.5


class _Row(Protocol):  # read-only members: frozen dataclasses fit
    @property
    def status(self) -> str: ...
    @property
    def reward(self) -> float: ...
    @property
    def steps(self) -> int: ...
    @property
    def started_at(self) -> float: ...
    @property
    def finished_at(self) -> float: ...


def time_series(rows: Sequence[_Row], running: bool = False) -> dict[str, list[Any]]:
    """Bucketed series (lists of equal length; ``t`` is seconds since the first episode started)."""
    keys = ("t", "done", "episodes_per_s", "steps_per_s", "reward_mean", "infra_errors")
    if not rows:
        return {k: [] for k in keys}
    t0 = min(r.started_at for r in rows)
    t1 = max(max(r.finished_at for r in rows), time.time() if running else 0.0)
    width = max((t1 - t0) / MAX_POINTS, MIN_BUCKET_S)
    n = max(1, min(MAX_POINTS, int((t1 - t0) / width) + 1))
    done, steps, completed, infra = [0] * n, [0] * n, [0] * n, [0] * n
    reward = [0.0] * n
    for r in rows:
        b = min(n - 1, max(0, int((r.finished_at - t0) / width)))
        done[b] += 1
        steps[b] += r.steps
        if r.status == "completed":
            completed[b] += 1
            reward[b] += r.reward
        elif r.status == "infra_error":
            infra[b] += 1
    out: dict[str, list[Any]] = {k: [] for k in keys}
    cum_done = cum_infra = 0
    for b in range(n):
        cum_done += done[b]
        cum_infra += infra[b]
        span = width if b < n - 1 else max(t1 - t0 - b * width, MIN_BUCKET_S / 5)  # the last one: so far
        out["t"].append(round(b * width + span, 2))
        out["done"].append(cum_done)
        out["episodes_per_s"].append(round(done[b] / span, 3))
        out["steps_per_s"].append(round(steps[b] / span, 3))
        out["reward_mean"].append(round(reward[b] / completed[b], 4) if completed[b] else None)
        out["infra_errors"].append(cum_infra)
    return out


__all__ = ["time_series"]
