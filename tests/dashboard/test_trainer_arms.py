"""The training view's arms: from summary.json (the three arms and the paired differences), from the eval
records while the run goes on, and from a run of the trainer before the arms (before_rl/after_rl)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envfarm.dashboard.trainer_reader import TrainerRun
from envfarm.trainer.metrics import Metrics


def test_arms_from_eval_records_then_from_the_summary(tmp_path: Path) -> None:
    m = Metrics(tmp_path, tensorboard=False)
    m.eval(arm="sft", mode="greedy", mean_reward=0.1, episodes=500)
    m.eval(arm="sft", mode="sampled", mean_reward=0.3, episodes=500)
    m.eval(arm="rl", mode="greedy", mean_reward=0.7, episodes=500)
    m.close()
    view = TrainerRun(tmp_path).view()
    assert list(view["arms"]) == ["sft", "rl"] and view["diffs"] == {}
    assert view["arms"]["sft"]["sampled"] == {"mean": 0.3, "ci95": None, "episodes": 500}
    assert view["evals"][0]["arm"] == "sft" and view["evals"][0]["mode"] == "greedy"
    score = {"mean": 0.7, "ci95": [0.66, 0.74], "episodes": 500}
    summary = {"arms": {a: {"greedy": score, "sampled": score} for a in ("sft", "sft_more", "rl")},
               "rl_minus_sft_more": {"greedy": {"diff": 0.2, "ci95": [0.15, 0.25]}},
               "rl_minus_sft": {"greedy": {"diff": 0.6, "ci95": [0.55, 0.65]}}}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    view = TrainerRun(tmp_path).view()
    assert list(view["arms"]) == ["sft", "sft_more", "rl"] and view["arms"]["rl"]["greedy"] == score
    assert view["diffs"]["rl_minus_sft_more"]["greedy"]["ci95"] == [0.15, 0.25]


def test_a_run_before_the_arms(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text(
        '{"kind": "eval", "time": 1, "phase": "before_rl", "mean_reward": 0.41, "episodes": 500}\n'
        '{"kind": "eval", "time": 2, "phase": "after_rl", "mean_reward": 0.73, "episodes": 500}\n')
    (tmp_path / "summary.json").write_text(json.dumps({"eval_before_rl": 0.41, "eval_after_rl": 0.73,
                                                       "diff_ci95": [0.29, 0.35]}))
    view = TrainerRun(tmp_path).view()
    assert view["arms"]["sft"]["sampled"]["mean"] == 0.41 and view["arms"]["rl"]["sampled"]["mean"] == 0.73
    assert view["diffs"] == {"rl_minus_sft": {"sampled": {"diff": 0.32, "ci95": [0.29, 0.35]}}}


@pytest.mark.bwrap  # with the browser tests (chromium + chromedriver)
def test_the_training_view_draws_the_arms(tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    from envfarm.dashboard.sources import discover
    from envfarm.testing.dashboard_browser import available, browser, console_errors, text_of, wait_for
    from envfarm.testing.dashboard_runs import serve_in_thread, write_trainer_run

    assert available() is None, available()
    folder = write_trainer_run(tmp_path / "train")
    score = {"mean": 0.7, "ci95": [0.66, 0.74], "episodes": 500}
    (folder / "summary.json").write_text(json.dumps({
        "arms": {a: {"greedy": score, "sampled": score} for a in ("sft", "sft_more", "rl")},
        "rl_minus_sft_more": {"greedy": {"diff": 0.2, "ci95": [0.15, 0.25]},
                              "sampled": {"diff": 0.125, "ci95": [0.1, 0.15]}},
        "rl_minus_sft": {"greedy": {"diff": 0.6, "ci95": [0.55, 0.65]}}}))
    with browser() as driver, serve_in_thread([folder]) as url:
        ids = {s.kind: s.id for s in discover([folder])}
        driver.get(f"{url}#/trainer/{ids['trainer']}")
        wait_for(driver, "#arms")
        rows = [r.text for r in driver.find_elements(By.CSS_SELECTOR, "#arms tbody tr")]
        assert [r.split()[0] for r in rows] == ["sft", "sft_more", "rl", "rl", "rl"]
        assert "0.700 [0.660, 0.740] · 500 eps" in rows[0] and "+0.200 [0.150, 0.250]" in rows[3]
        assert text_of(driver, "#train-eval-diff") == "0.125"  # RL - sft_more, sampled
        assert console_errors(driver) == []
