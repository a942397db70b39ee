"""Trajectories round-trip through JSON; pass@k is the unbiased estimator; CIs cover what they should."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from envfarm.rollout.eval import bootstrap, evaluate, pass_at_k, wilson
from envfarm.rollout.trajectory import Timings, Trajectory, Turn, oldest_version


def make_traj(index: int, seed: int, reward: float, status: str = "completed", **kw: object) -> Trajectory:
    turns = (Turn("a", "o", reward, True, False, tool_name="submit"),) if status == "completed" else ()
    return Trajectory(episode_id=f"r:{index}", env_id="e", index=index, seed=seed, task_id=f"t{seed}",
                      status=status, turns=turns, **kw)  # type: ignore[arg-type]


def test_trajectory_json_round_trip_is_exact() -> None:
    turn = Turn('{"name": "calc"}', "42", 0.5, False, False, tool_name="calc", weight_version=3,
                prompt_token_ids=(1, 2), token_ids=(5, 6, 7), logprobs=(-0.1, -0.2, -0.3),
                finish_reason="stop", policy_s=0.01, env_s=0.02)
    t = Trajectory(episode_id="abc:000001", env_id="envfarm/ToolCalc-v0", index=1, seed=7, task_id="x",
                   status="completed", turns=(turn, turn), messages=({"role": "user", "content": "ünï"},),
                   tools=({"type": "function", "function": {"name": "calc"}},), weight_version=3,
                   policy="oracle", timings=Timings(0.1, 0.2, 0.3, 0.7), meta={"correct": True})
    line = t.to_json()
    assert "\n" not in line
    back = Trajectory.from_json(line)
    assert back == t
    assert json.loads(line)["reward"] == 1.0 and back.reward == 1.0 and back.steps == 2


def test_unknown_status_is_refused() -> None:
    data = make_traj(0, 0, 1.0).to_dict() | {"status": "weird"}
    with pytest.raises(ValueError, match="weird"):
        Trajectory.from_dict(data)


def test_oldest_version() -> None:
    assert oldest_version([None, 4, 2, 7]) == 2
    assert oldest_version([None, "default"]) == "default"
    assert oldest_version([]) is None


def brute_pass_at_k(results: list[bool], k: int) -> float:
    """Fraction of k-subsets of the attempts with at least one success."""
    subsets = list(itertools.combinations(results, k))
    return sum(any(s) for s in subsets) / len(subsets)


@pytest.mark.parametrize(("n", "c"), [(1, 0), (1, 1), (5, 0), (5, 2), (5, 5), (8, 3)])
def test_pass_at_k_is_the_unbiased_estimator(n: int, c: int) -> None:
    results = [True] * c + [False] * (n - c)
    for k in range(1, n + 1):
        assert math.isclose(pass_at_k(n, c, k), brute_pass_at_k(results, k))
    with pytest.raises(ValueError):
        pass_at_k(n, c, n + 1)


def test_wilson_interval() -> None:
    low, high = wilson(50, 100)
    assert math.isclose(low, 0.4038, abs_tol=1e-3) and math.isclose(high, 0.5962, abs_tol=1e-3)
    low, high = wilson(10, 10)
    assert math.isclose(high, 1.0) and 0.69 < low < 0.73  # never a degenerate [1, 1]


def test_bootstrap_interval_covers_the_mean() -> None:
    values = list(np.random.default_rng(1).random(200))
    low, high = bootstrap(values)
    assert low < float(np.mean(values)) < high and high - low < 0.2
    assert bootstrap(values) == (low, high)  # deterministic


def test_evaluate_per_task_and_leaves_out_infra_errors() -> None:
    trajs = []
    outcomes = {0: [1, 1, 1], 1: [1, 0, 0], 2: [0, 0, 0]}
    for seed, rewards in outcomes.items():
        for a, r in enumerate(rewards):
            trajs.append(make_traj(seed * 4 + a, seed, float(r)))
    trajs.append(make_traj(3, 0, 0.0, status="infra_error", infra_error="SandboxCrashed: killed"))
    trajs.append(make_traj(7, 1, 0.0, status="interrupted"))
    report = evaluate(trajs, attempts=3)
    assert report.tasks == 3 and report.infra_errors == 1
    by_seed = {r.seed: r for r in report.per_task}
    assert by_seed[0].attempts == 3 and by_seed[0].successes == 3 and by_seed[0].infra_errors == 1
    assert math.isclose(by_seed[1].pass_at[1], 1 / 3) and by_seed[1].pass_at[3] == 1.0
    assert math.isclose(report.metrics["pass@1"].value, (1 + 1 / 3 + 0) / 3)
    assert math.isclose(report.metrics["pass@3"].value, 2 / 3)
    assert report.metrics["pass@1"].method == "bootstrap"
    assert report.metrics["pass@3"].method == "wilson"  # n = k attempts: each task passes or not
    one = evaluate([make_traj(i, i, float(i % 2)) for i in range(10)], attempts=1)
    assert one.metrics["pass@1"].method == "wilson" and one.metrics["pass@1"].value == 0.5


def test_all_passing_tasks_get_an_interval_below_one() -> None:
    trajs = [make_traj(seed * 2 + a, seed, 1.0) for seed in range(30) for a in range(2)]
    report = evaluate(trajs, attempts=2)
    for name in ("pass@1", "pass@2"):
        est = report.metrics[name]
        assert est.value == 1.0 and est.method == "wilson"
        assert 0.85 < est.low < 0.9 and est.high == pytest.approx(1.0)  # 30 of 30: not a certainty


def test_tasks_without_enough_attempts_are_listed() -> None:
    trajs = [make_traj(0, 0, 1.0), make_traj(1, 0, 1.0),
             make_traj(2, 1, 1.0), make_traj(3, 1, 0.0, status="infra_error", infra_error="x")]
    report = evaluate(trajs, attempts=2)
    assert report.excluded == {"pass@2": ["t1"]}
    assert report.metrics["pass@2"].n_tasks == 1 and report.metrics["pass@1"].n_tasks == 2
