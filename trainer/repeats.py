"""``envfarm train --repeats N``: N independent training runs and the run-to-run spread of each arm.

    result = await train_repeats(TrainConfig(teacher="noisy"), Path("out"), repeats=3)

Run k trains in ``DIR/run-<k>`` with ``seed + k`` (model init, SFT batch order, the noisy teacher's choice
of mistaken demos, RL sampling), on the same evaluation seeds; a finished run is read back, an unfinished
one resumed, so the same command continues an interrupted series. ``DIR/repeats.json`` (values show the
shape only):

    {"runs": ["run-0", "run-1", "run-2"], "seeds": [0, 1, 2], "wall_s": [1400.2, ...],
     "arms": {"rl": {"greedy": {"mean": 0.61, "std": 0.03, "min": 0.58, "max": 0.64,
                                "values": [0.58, 0.61, 0.64]}, "sampled": {...}},
              "sft": ..., "sft_more": ...},
     "rl_minus_sft_more": {"greedy": {"mean": ..., "std": ..., "min": ..., "max": ..., "values": [...],
                                      "ci95_above_zero": 3, "positive": 3}, "sampled": {...}},
     "rl_minus_sft": {...}}

``std`` is the sample standard deviation over runs (0 for one run); ``ci95_above_zero`` counts the runs
whose own paired-bootstrap interval lies above zero, ``positive`` those whose difference is above zero.
"""

from __future__ import annotations

import asyncio
import json
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .loop import TrainProgress, train
from .train_config import CONFIG_FILE, TrainConfig

REPEATS_FILE = "repeats.json"


@dataclass(frozen=True)
class Spread:
    """One figure over the runs."""

    mean: float
    std: float
    min: float
    max: float
    values: tuple[float, ...]

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        std = statistics.stdev(values) if len(values) > 1 else 0.0
        return cls(round(statistics.fmean(values), 4), round(std, 4), min(values), max(values), tuple(values))


@dataclass(frozen=True)
class RepeatsResult:
    """The spread of every arm and difference over the runs (see the module docstring)."""

    runs: tuple[str, ...]
    seeds: tuple[int, ...]
    wall_s: tuple[float, ...]
    arms: dict[str, dict[str, Spread]]
    diffs: dict[str, dict[str, tuple[Spread, int, int]]]
    """"rl_minus_sft_more"/"rl_minus_sft" -> mode -> (spread, runs with CI above zero, runs above zero)."""

    @classmethod
    def of(cls, runs: list[str], summaries: list[dict[str, Any]]) -> RepeatsResult:
        first = summaries[0]
        arms = {arm: {mode: Spread.of([s["arms"][arm][mode]["mean"] for s in summaries]) for mode in modes}
                for arm, modes in first["arms"].items()}
        diffs = {}
        for name in ("rl_minus_sft_more", "rl_minus_sft"):
            diffs[name] = {mode: (Spread.of([s[name][mode]["diff"] for s in summaries]),
                                  sum(s[name][mode]["ci95"][0] > 0 for s in summaries),
                                  sum(s[name][mode]["diff"] > 0 for s in summaries))
                           for mode in first.get(name, {})}
        return cls(tuple(runs), tuple(s["config"]["seed"] for s in summaries),
                   tuple(s["wall_s"] for s in summaries), arms, diffs)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"runs": list(self.runs), "seeds": list(self.seeds),
                               "wall_s": list(self.wall_s)}
        out["arms"] = {a: {m: vars(s) for m, s in modes.items()} for a, modes in self.arms.items()}
        for name, modes in self.diffs.items():
            out[name] = {m: {**vars(s), "ci95_above_zero": above, "positive": positive}
                         for m, (s, above, positive) in modes.items()}
        return out


async def train_repeats(config: TrainConfig, out: Path, repeats: int,
                        progress: TrainProgress | None = None) -> RepeatsResult:
    """Train ``repeats`` runs (``config.seed + k``) under ``out`` and write ``out/repeats.json``."""
    names, summaries = [], []
    for k in range(repeats):
        folder = Path(out) / f"run-{k}"
        summary = folder / "summary.json"
        if not await asyncio.to_thread(summary.exists):
            resume = await asyncio.to_thread((folder / CONFIG_FILE).exists)
            if progress is not None:
                progress.phase = f"run {k + 1}/{repeats}"
            await train(replace(config, seed=config.seed + k) if not resume else None, folder, resume=resume,
                        progress=progress)
        names.append(folder.name)
        summaries.append(json.loads(await asyncio.to_thread(summary.read_text)))
    result = RepeatsResult.of(names, summaries)
    text = json.dumps(result.to_json(), indent=2) + "\n"
    await asyncio.to_thread((Path(out) / REPEATS_FILE).write_text, text)
    return result


__all__ = ["REPEATS_FILE", "RepeatsResult", "Spread", "train_repeats"]
