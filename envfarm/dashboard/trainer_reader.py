"""A trainer run folder: DIR/metrics.jsonl (read incrementally) and DIR/summary.json.

metrics.jsonl holds one JSON object per line, each with ``kind`` and ``time`` (unix seconds):

    {"kind": "update", "step": 12, "phase": "sft"|"rl", "loss": 0.8, "reward_mean": 0.4|null, "kl": ...|null,
     "clip_frac": ...|null, "lr": 3e-4, "samples": 128, "tokens": 40960, "version": 3}
    {"kind": "publish", "version": 3, "bytes": 3400000, "seconds": 0.02}
    {"kind": "eval", "phase": "rl-greedy", "arm": "rl", "mode": "greedy", "mean_reward": 0.61,
     "episodes": 1000}

summary.json (envfarm/trainer/summary.py) has ``arms.<arm>.<mode>`` = {mean, ci95, episodes} for the arms
sft, sft_more, rl and the modes greedy, sampled, and ``rl_minus_sft_more.<mode>``, ``rl_minus_sft.<mode>`` =
{diff, ci95}; a run of an older trainer has eval_before_rl, eval_after_rl, eval_episodes and diff_ci95 and
eval records with phase before_rl/after_rl (read as the sft and rl arms, sampled). The view's ``arms`` comes
from the summary once it exists, from the eval records (means only) while the run goes on. Missing fields
are None; unknown kinds are counted and otherwise ignored; a line that is not a JSON object is skipped.
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
    arm: str | None = None
    mode: str | None = None
    mean_reward: float | None = None
    episodes: int | None = None


ARMS = ("sft", "sft_more", "rl")
MODES = ("greedy", "sampled")
LEGACY_PHASES = {"before_rl": ("sft", "sampled"), "after_rl": ("rl", "sampled")}
"""Eval phases of the trainer before the three arms, as (arm, mode)."""


def arms_view(summary: Mapping[str, Any] | None, evals: list[Eval]) -> dict[str, Any]:
    """``{"arms": {arm: {mode: {mean, ci95, episodes}}}, "diffs": {name: {mode: {diff, ci95}}}}``: from
    summary.json when it has arms, else the newest eval record of each (arm, mode) (ci95 None)."""
    if summary and isinstance(summary.get("arms"), Mapping):
        names = ("rl_minus_sft_more", "rl_minus_sft")
        return {"arms": dict(summary["arms"]),
                "diffs": {k: summary[k] for k in names if isinstance(summary.get(k), Mapping)}}
    arms: dict[str, dict[str, Any]] = {}
    for e in evals:
        arm, mode = (e.arm, e.mode) if e.arm and e.mode else LEGACY_PHASES.get(e.phase or "", (None, None))
        if arm is not None and mode is not None and e.mean_reward is not None:
            arms.setdefault(arm, {})[mode] = {"mean": e.mean_reward, "ci95": None, "episodes": e.episodes}
    diffs: dict[str, Any] = {}
    if summary and isinstance(summary.get("diff_ci95"), list) and summary.get("eval_after_rl") is not None \
            and summary.get("eval_before_rl") is not None:
        diff = summary["eval_after_rl"] - summary["eval_before_rl"]
        diffs["rl_minus_sft"] = {"sampled": {"diff": round(diff, 4), "ci95": summary["diff_ci95"]}}
    order = (*ARMS, *sorted(set(arms) - set(ARMS)))
    return {"arms": {a: arms[a] for a in order if a in arms}, "diffs": diffs}


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
        """The training view's JSON: update curves (at most MAX_POINTS), publishes, evals, summary, and the
        arms and their differences (:func:`arms_view`)."""
        self.refresh()
        with self._lock:
            shown = _thin(self.updates)
            last = self.updates[-1] if self.updates else None
            return {
                "kind": "trainer", "path": str(self.path),
                "updates": [asdict(u) for u in shown], "n_updates": len(self.updates),
                "last": asdict(last) if last else None,
                "publishes": [asdict(p) for p in self.publishes], "evals": [asdict(e) for e in self.evals],
                "summary": self.summary, **arms_view(self.summary, self.evals),
                "kinds": dict(self.kinds), "bad_lines": self.bad_lines,
                "unknown_kinds": sorted(k for k in self.kinds if k not in KINDS),
            }


__all__ = ["Eval", "Publish", "TrainerRun", "Update", "arms_view"]
