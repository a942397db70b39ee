"""A trainer run folder: DIR/metrics.jsonl (read incrementally) and DIR/summary.json.

metrics.jsonl holds one JSON object per line, each with ``kind`` and ``time`` (unix seconds):

    {"kind": "update", "step": 12, "phase": "sft"|"rl", "loss": 0.8, "reward_mean": 0.4|null, "kl": ...|null,
     "clip_frac": ...|null, "lr": 3e-4, "samples": 128, "tokens": 40960, "version": 3}
    {"kind": "publish", "version": 3, "bytes": 3400000, "seconds": 0.02}
    {"kind": "eval", "phase": "before_rl"|"after_rl", "mean_reward": 0.61, "episodes": 1000}

summary.json has at least eval_before_rl, eval_after_rl, eval_episodes and diff_ci95 ([lo, hi]). Missing
fields are None; unknown kinds are counted and otherwise ignored; a line that is not a JSON object is skipped.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from .tail import JsonlTail, Throttle, read_json

REFRESH_S = 0.5
MAX_POINTS = 500


@dataclass(frozen=True)
class Update:
    time: float | None = None
    step: int | None = None
    phase: str | None = None
    loss: float | None = None
    reward_mean: float | None = None
    kl: float | None = None
    clip_frac: float | None = None
    lr: float | None = None
    samples: int | None = None
    tokens: int | None = None
    version: int | None = None
    extra: Mapping[str, float] = field(default_factory=dict)
    """Numeric keys beyond the agreed ones (the trainer adds e.g. grad_norm, held_out_match)."""


@dataclass(frozen=True)
class Publish:
    time: float | None = None
    version: int | None = None
    bytes: int | None = None
    seconds: float | None = None


@dataclass(frozen=True)
class Eval:
    time: float | None = None
    phase: str | None = None
    mean_reward: float | None = None
    episodes: int | None = None


KINDS: dict[str, type[Update] | type[Publish] | type[Eval]] = {"update": Update, "publish": Publish,
                                                                 "eval": Eval}


def _record(data: Mapping[str, Any]) -> Update | Publish | Eval | None:
    cls = KINDS.get(str(data.get("kind")))
    if cls is None:
        return None
    names = {f.name for f in fields(cls)} - {"extra"}
    known = {k: v for k, v in data.items() if k in names}
    if cls is Update:
        extra = {k: v for k, v in data.items() if k not in names and k != "kind"
                 and isinstance(v, int | float) and not isinstance(v, bool)}
        return Update(**known, extra=extra)
    return cls(**known)


def _thin(updates: list[Update]) -> list[Update]:
    """At most about MAX_POINTS updates, evenly spaced, plus the last one and every update carrying an extra
    key that most updates lack (a held-out check every 25 steps must not be thinned away)."""
    step = max(1, -(-len(updates) // MAX_POINTS))
    if step == 1:
        return list(updates)
    counts = Counter(k for u in updates for k in u.extra)
    sparse = {k for k, n in counts.items() if n * 2 < len(updates)}
    return [u for i, u in enumerate(updates)
            if i % step == 0 or i == len(updates) - 1 or (sparse and sparse & u.extra.keys())]


class TrainerRun:
    """One trainer folder (see the module docstring). Public methods are blocking and thread-safe."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.metrics = JsonlTail(self.path / "metrics.jsonl")
        self.updates: list[Update] = []
        self.publishes: list[Publish] = []
        self.evals: list[Eval] = []
        self.kinds: Counter[str] = Counter()
        self.bad_lines = 0
        self.summary: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self._throttle = Throttle(REFRESH_S)

    def refresh(self, force: bool = False) -> None:
        with self._lock:
            if not self._throttle.due(force):
                return
            reset, lines = self.metrics.read_new()
            if reset:
                self.updates, self.publishes, self.evals = [], [], []
                self.kinds, self.bad_lines = Counter(), 0
            for line in lines:
                self._add(line.data)
            self.summary = read_json(self.path / "summary.json")

    def _add(self, raw: bytes) -> None:
        try:
            data = json.loads(raw)
            if not isinstance(data, dict):
                raise ValueError("not an object")
            rec = _record(data)
        except (ValueError, TypeError):
            self.bad_lines += 1
            return
        self.kinds[str(data.get("kind"))] += 1
        if isinstance(rec, Update):
            self.updates.append(rec)
        elif isinstance(rec, Publish):
            self.publishes.append(rec)
        elif isinstance(rec, Eval):
            self.evals.append(rec)

    def view(self) -> dict[str, Any]:
        """The training view's JSON: update curves (at most MAX_POINTS), publishes, evals, summary."""
        self.refresh()
        with self._lock:
            shown = _thin(self.updates)
            last = self.updates[-1] if self.updates else None
            return {
                "kind": "trainer", "path": str(self.path),
                "updates": [asdict(u) for u in shown], "n_updates": len(self.updates),
                "last": asdict(last) if last else None,
                "publishes": [asdict(p) for p in self.publishes], "evals": [asdict(e) for e in self.evals],
                "summary": self.summary, "kinds": dict(self.kinds), "bad_lines": self.bad_lines,
                "unknown_kinds": sorted(k for k in self.kinds if k not in KINDS),
            }


__all__ = ["Eval", "Publish", "TrainerRun", "Update"]
