"""What a training run reports: three arms from one SFT checkpoint, each evaluated greedy and sampled, and
the paired differences RL - sft_more and RL - sft. ``train()`` returns a :class:`TrainResult`;
``DIR/summary.json`` is its :meth:`TrainResult.to_json` (the values show the shape, not a measurement):

    {"env_id": "envfarm/ToolCalc-v0", "teacher": {"name": "noisy", "error": 0.6},
     "eval_split": "test", "eval_episodes": 500, "eval_temperature": 0.7,
     "arms": {"sft":      {"greedy": {"mean": 0.02, "ci95": [0.01, 0.03], "episodes": 500},
                           "sampled": {...}},
              "sft_more": {...}, "rl": {...}},
     "rl_minus_sft_more": {"greedy": {"diff": 0.41, "ci95": [0.36, 0.45]}, "sampled": {...}},
     "rl_minus_sft":      {"greedy": {...}, "sampled": {...}},
     "seeds": {"demos": [1000000, 1002000], "more_demos": [...], "rl": [...], "validation": [...],
               "test": [...], "eval": [3000000, 3000500]},
     "compute": {"rl": {"seconds": 270.1, "sampled_tokens": 151000, "updates": 15},
                 "sft_more": {"seconds": 271.0, "tokens": 352000, "steps": 700}},
     "phase_s": {"demos": 55.2, "sft": 420.0, "eval_sft": 120.3, "rl": 270.1, ...}, "wall_s": 1400.2,
     ...}

``mean`` is the mean reward over the evaluation seeds an arm scored (infrastructure failures left out),
``ci95`` a percentile bootstrap of it; a difference's ``ci95`` is the paired bootstrap over the seeds both
arms scored (evaluation.py). Seed ranges are [start, stop).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from .evaluation import EvalResult, mean_bootstrap, paired_bootstrap

ARMS = ("sft", "sft_more", "rl")
"""sft: the SFT checkpoint; sft_more: SFT continued on fresh teacher demos with RL's compute; rl: GRPO."""
MODES = {"greedy": 0.0, "sampled": None}
"""Evaluation modes and their temperature (None: the RL sampling temperature)."""


@dataclass(frozen=True)
class Score:
    """One arm in one mode."""

    mean: float
    ci95: tuple[float, float]
    episodes: int

    @classmethod
    def of(cls, result: EvalResult) -> Score:
        mean, low, high = mean_bootstrap(result.per_seed)
        return cls(round(mean, 4), (round(low, 4), round(high, 4)), result.episodes)


@dataclass(frozen=True)
class Diff:
    """RL minus a baseline arm, paired over the seeds both scored."""

    diff: float
    ci95: tuple[float, float]

    @classmethod
    def of(cls, baseline: EvalResult, rl: EvalResult) -> Diff:
        diff, low, high, _ = paired_bootstrap(baseline.per_seed, rl.per_seed)
        return cls(round(diff, 4), (round(low, 4), round(high, 4)))


@dataclass(frozen=True)
class Compute:
    """What RL and the sft_more arm each spent (sft_more runs until it has matched RL on both)."""

    rl_seconds: float
    rl_sampled_tokens: int
    rl_updates: int
    sft_more_seconds: float
    sft_more_tokens: int
    sft_more_steps: int

    def to_json(self) -> dict[str, Any]:
        return {"rl": {"seconds": self.rl_seconds, "sampled_tokens": self.rl_sampled_tokens,
                       "updates": self.rl_updates},
                "sft_more": {"seconds": self.sft_more_seconds, "tokens": self.sft_more_tokens,
                             "steps": self.sft_more_steps}}


@dataclass(frozen=True)
class TrainResult:
    """A finished training run (see the module docstring for its JSON)."""

    env_id: str
    teacher: Mapping[str, Any]
    eval_split: str
    eval_episodes: int
    eval_temperature: float
    arms: Mapping[str, Mapping[str, Score]]
    rl_minus_sft_more: Mapping[str, Diff]
    rl_minus_sft: Mapping[str, Diff]
    seeds: Mapping[str, tuple[int, int]]
    compute: Compute
    phase_s: Mapping[str, float]
    wall_s: float
    sft_steps: int
    sft_held_out_match: float | None
    final_version: int
    dropped: Mapping[str, int]
    eval_infra_errors: Mapping[str, int]
    load_avg_end: tuple[float, ...]
    device: str
    torch_threads: int
    sft_settled: int = 0
    """The SFT step after which its learning rate dropped (``TrainConfig.sft_settle``; 0: it never did)."""
    config: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def build(cls, evals: Mapping[tuple[str, str], EvalResult], **rest: Any) -> TrainResult:
        """From the evaluations of every (arm, mode) present; differences for the baselines evaluated."""
        arms = {a: {m: Score.of(evals[a, m]) for m in MODES if (a, m) in evals} for a in ARMS}
        diffs = {base: {m: Diff.of(evals[base, m], evals["rl", m]) for m in MODES
                        if (base, m) in evals and ("rl", m) in evals} for base in ("sft_more", "sft")}
        infra = {f"{a}-{m}": r.infra_errors for (a, m), r in evals.items()}
        return cls(arms={a: s for a, s in arms.items() if s}, rl_minus_sft_more=diffs["sft_more"],
                   rl_minus_sft=diffs["sft"], eval_infra_errors=infra, **rest)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["compute"] = self.compute.to_json()
        return out


__all__ = ["ARMS", "MODES", "Compute", "Diff", "Score", "TrainResult"]
