"""Held-out evaluation of a served policy through the farm, and the paired comparison of two evaluations.

    result = await evaluate_served(url, config.farm_config(episodes=500, seed=3_000_000), run_dir,
                                   temperature=1.0, max_tokens=96)
    diff, lo, hi, n = paired_bootstrap(before.per_seed, after.per_seed)

An evaluation is an ``envfarm eval`` run (one attempt per held-out seed, ``openai:URL`` at the training
temperature) in its own run folder, so it resumes like any run. A policy error (an unparseable reply) scores
0; episodes broken by the infrastructure are left out, and the paired comparison uses the seeds both
evaluations scored. The difference's 95% interval is a percentile bootstrap over those seeds (resampling
seeds, keeping each seed's pair together), 10,000 resamples, fixed seed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from envfarm.rollout.eval import run_eval
from envfarm.rollout.farm import FarmConfig
from envfarm.rollout.openai_policy import OpenAIPolicy

BOOTSTRAP_SAMPLES = 10_000


@dataclass(frozen=True)
class EvalResult:
    """One evaluation: mean reward over the seeds it scored, and each seed's reward."""

    mean_reward: float
    episodes: int
    """Seeds scored (infrastructure failures left out)."""
    per_seed: Mapping[int, float]
    infra_errors: int
    run_dir: str
    wall_s: float


async def evaluate_served(url: str, config: FarmConfig, run_dir: Path, *, temperature: float,
                          max_tokens: int) -> EvalResult:
    """Run (or resume, when ``run_dir`` holds a run) the evaluation ``config`` (one attempt per seed) against
    the policy server at ``url``, sampling at ``temperature`` (0: greedy)."""
    t0 = time.monotonic()
    policy = OpenAIPolicy(url, temperature=temperature, max_tokens=max_tokens,
                          max_connections=config.concurrency, logprobs=False)
    resume = await asyncio.to_thread((Path(run_dir) / "run.json").exists)
    report = await run_eval(config, policy, Path(run_dir), resume=resume)
    per_seed = {r.seed: float(np.mean(r.rewards)) for r in report.per_task if r.rewards}
    mean = float(np.mean(list(per_seed.values()))) if per_seed else 0.0
    return EvalResult(mean, len(per_seed), per_seed, report.infra_errors, str(run_dir),
                      round(time.monotonic() - t0, 2))


def mean_bootstrap(rewards: Mapping[int, float], samples: int = BOOTSTRAP_SAMPLES,
                   seed: int = 0) -> tuple[float, float, float]:
    """(mean, 95% low, 95% high) of the per-seed rewards: a percentile bootstrap over seeds."""
    if not rewards:
        return 0.0, 0.0, 0.0
    return _bootstrap(np.array([rewards[s] for s in sorted(rewards)], dtype=float), samples, seed)


def _bootstrap(values: np.ndarray, samples: int, seed: int) -> tuple[float, float, float]:
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(samples, len(values)))].mean(axis=1)
    low, high = np.quantile(means, [0.025, 0.975])
    return float(values.mean()), float(low), float(high)


def paired_bootstrap(before: Mapping[int, float], after: Mapping[int, float],
                     samples: int = BOOTSTRAP_SAMPLES, seed: int = 0) -> tuple[float, float, float, int]:
    """(mean of after - before, 95% low, 95% high, seeds) over the seeds both scored."""
    common = sorted(set(before) & set(after))
    if not common:
        return 0.0, 0.0, 0.0, 0
    diff, low, high = _bootstrap(np.array([after[s] - before[s] for s in common], dtype=float), samples, seed)
    return diff, low, high, len(common)


__all__ = ["EvalResult", "evaluate_served", "mean_bootstrap", "paired_bootstrap"]
