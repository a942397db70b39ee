"""Evaluating a policy: pass@1 and unbiased pass@k with 95% confidence intervals, per-task results.

    config = FarmConfig(env_id=..., episodes=tasks * k, attempts=k, backend="bwrap")
    report = await run_eval(config, policy, run_dir=Path("runs/eval-a"))   # or --resume: resume=True
    report.metrics["pass@1"]        # Estimate(value, low, high, n_tasks)

An evaluation is a farm run whose consecutive episodes share a task: task t (seed ``seed + t``) is attempted
``attempts`` times, so it resumes like any run (``--resume RUN``); its trajectories stay in RUN/spool.jsonl.
An attempt succeeds when its return reaches ``success_threshold``; a policy error (e.g. a prompt too long for
the model) is a failed attempt. Attempts broken by the infrastructure or by an env bug are left out, not
counted as failures; a task with fewer than k good attempts is left out of pass@k (and listed).

- pass@k per task is the unbiased estimator of Chen et al. (2021): ``1 - C(n-c, k) / C(n, k)`` for n good
  attempts of which c succeeded; the metric is its mean over tasks.
- 95% CI: when every task's value is 0 or 1 (one attempt per task; pass@k with exactly k attempts; every
  task all-or-nothing) the metric is a binomial proportion over tasks and gets the Wilson score interval,
  which never collapses to [1, 1] when every task passes; otherwise a percentile bootstrap over tasks (10,000
  resamples, fixed seed), which respects that attempts at the same task are correlated.

Env-specific outputs come from the env class: every writer in its ``eval_artifacts`` (``envs/core.py``; e.g.
CodeRepair's SWE-bench predictions) gets the trajectories and the run folder, and the paths it wrote are
listed in the report.
"""

from __future__ import annotations

import asyncio
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from envfarm.errors import ConfigError

from .environments import env_class
from .farm import Farm, FarmConfig
from .policies import Policy
from .runs import RunDir
from .sinks import Sink
from .trajectory import Trajectory

Z95 = 1.959963984540054
BOOTSTRAP_SAMPLES = 10_000


@dataclass(frozen=True)
class Estimate:
    """A metric over tasks with its 95% confidence interval."""

    value: float
    low: float
    high: float
    n_tasks: int
    method: str
    """``wilson`` or ``bootstrap``."""


@dataclass(frozen=True)
class TaskResult:
    task_id: str
    seed: int
    attempts: int
    """Attempts that ran to their end (infrastructure failures left out)."""
    successes: int
    rewards: tuple[float, ...]
    infra_errors: int
    pass_at: dict[int, float]
    """pass@k estimate of this task for each reported k it has enough attempts for."""


@dataclass(frozen=True)
class EvalReport:
    env_id: str
    policy: str
    tasks: int
    attempts: int
    success_threshold: float
    metrics: dict[str, Estimate]
    """``pass@1``, ``pass@k`` (k = attempts) and ``mean_reward``."""
    per_task: tuple[TaskResult, ...]
    infra_errors: int
    excluded: dict[str, list[str]] = field(default_factory=dict)
    """Metric name -> task ids left out (not enough good attempts)."""
    artifacts: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one task: n attempts, c correct (Chen et al. 2021)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} attempts, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def bootstrap(values: Sequence[float], samples: int = BOOTSTRAP_SAMPLES,
              seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap 95% interval of the mean of ``values`` (resampling the values)."""
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        return 0.0, 1.0
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(samples, len(x)))].mean(axis=1)
    low, high = np.quantile(means, [0.025, 0.975])
    return float(low), float(high)


def evaluate(trajectories: Iterable[Trajectory], attempts: int, success_threshold: float = 1.0,
             env_id: str = "", policy: str = "") -> EvalReport:
    """The report for the trajectories of one evaluation run (any order; interrupted ones are ignored)."""
    by_task: dict[int, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        if t.status != "interrupted":
            by_task[t.seed].append(t)
    per_task = tuple(_task_result(ts, attempts, success_threshold) for _, ts in sorted(by_task.items()))
    ks = sorted({1, attempts})
    metrics: dict[str, Estimate] = {}
    excluded: dict[str, list[str]] = {}
    for k in ks:
        have = [r for r in per_task if k in r.pass_at]
        excluded[f"pass@{k}"] = [r.task_id for r in per_task if k not in r.pass_at]
        values = [r.pass_at[k] for r in have]
        metrics[f"pass@{k}"] = _estimate(values, binary=all(v in (0.0, 1.0) for v in values))
    rewards = [float(np.mean(r.rewards)) for r in per_task if r.rewards]
    metrics["mean_reward"] = _estimate(rewards, binary=False)
    return EvalReport(env_id=env_id, policy=policy, tasks=len(per_task), attempts=attempts,
                      success_threshold=success_threshold, metrics=metrics, per_task=per_task,
                      infra_errors=sum(r.infra_errors for r in per_task),
                      excluded={k: v for k, v in excluded.items() if v})


def _task_result(ts: list[Trajectory], attempts: int, threshold: float) -> TaskResult:
    good = [t for t in ts if t.status in ("completed", "policy_error")]  # the rest is not the policy's doing
    rewards = tuple(t.reward if t.status == "completed" else 0.0 for t in good)
    c = sum(r >= threshold for r in rewards)
    n = len(good)
    pass_at = {k: pass_at_k(n, c, k) for k in sorted({1, attempts}) if k <= n}
    return TaskResult(task_id=ts[0].task_id, seed=ts[0].seed, attempts=n, successes=c, rewards=rewards,
                      infra_errors=len(ts) - n, pass_at=pass_at)


def _estimate(values: list[float], binary: bool) -> Estimate:
    n = len(values)
    mean = float(np.mean(values)) if n else 0.0
    if binary:
        low, high = wilson(round(sum(values)), n)
        return Estimate(mean, low, high, n, "wilson")
    low, high = bootstrap(values)
    return Estimate(mean, low, high, n, "bootstrap")


def eval_farm(config: FarmConfig, policy: Policy, run_dir: Path, *, resume: bool = False,
              sinks: Sequence[Sink] = ()) -> Farm:
    """The farm that plays an evaluation's episodes (iterate ``farm.run()``, then :func:`report_run`)."""
    if config.episodes % config.attempts:
        raise ConfigError(f"an evaluation runs tasks x attempts episodes; {config.episodes} is not a "
                          f"multiple of {config.attempts}")
    return Farm(config, policy, run_dir=run_dir, resume=resume, sinks=sinks)


async def report_run(run_dir: Path, success_threshold: float = 1.0) -> EvalReport:
    """The report on every trajectory of the run in ``run_dir``, plus the env class's ``eval_artifacts``."""
    folder = await RunDir.load(run_dir)
    spec = folder.spec
    trajectories = await folder.finished()
    report = evaluate(trajectories, spec.attempts, success_threshold, spec.env_id, spec.policy)
    paths: list[str] = []
    for writer in env_class(spec.env_id).eval_artifacts:
        written = await asyncio.to_thread(writer, trajectories, Path(run_dir))
        paths.extend(str(p) for p in written)
    return replace(report, artifacts=tuple(paths)) if paths else report


async def run_eval(config: FarmConfig, policy: Policy, run_dir: Path, *, resume: bool = False,
                   success_threshold: float = 1.0, sinks: Sequence[Sink] = ()) -> EvalReport:
    """Run (or resume) an evaluation to its end and report on it."""
    farm = eval_farm(config, policy, run_dir, resume=resume, sinks=sinks)
    async for _ in farm.run():
        pass
    return await report_run(run_dir, success_threshold)


__all__ = ["Estimate", "EvalReport", "TaskResult", "bootstrap", "eval_farm", "evaluate", "pass_at_k",
           "report_run", "run_eval", "wilson"]
