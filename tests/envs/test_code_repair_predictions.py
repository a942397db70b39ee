"""``envfarm eval`` on CodeRepair writes SWE-bench predictions that the harness grades the same way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envfarm.cli import app
from envfarm.envs.code_repair import builtin
from envfarm.envs.code_repair.predictions import ALL_ATTEMPTS, PREDICTIONS

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_eval_predictions_are_graded_alike_by_the_harness(tmp_path: Path) -> None:
    run = tmp_path / "run"
    res = CliRunner().invoke(app, [
        "eval", "--env", "envfarm/CodeRepair-v0", "--policy", "oracle", "--num-tasks", "2", "--attempts", "2",
        "--backend", "docker", "--concurrency", "2", "--run-dir", str(run), "--quiet"])
    assert res.exit_code == 0, res.output
    first, every = rows(run / PREDICTIONS), rows(run / ALL_ATTEMPTS)
    assert len(first) == 2 and len(every) == 4
    assert [r["attempt"] for r in every] == [0, 1, 0, 1] and all(r["resolved"] for r in every)
    tasks = {r["instance_id"]: r for r in builtin.rows()}
    for pred in first:
        assert pred["model_patch"].strip() and pred["instance_id"] in tasks
    report = json.loads((run / "eval.json").read_text())
    assert any(str(run / PREDICTIONS) == a for a in report["artifacts"])

    res = CliRunner().invoke(app, [
        "harness", "run", "--instances", str(builtin.TASKS_FILE), "--predictions", str(run / PREDICTIONS),
        "--run-id", "preds", "--repo-source", str(builtin.cached_repos()),
        "--report-dir", str(tmp_path / "reports"), "--max-workers", "2"])
    assert res.exit_code == 0, res.output
    graded = json.loads((tmp_path / "reports" / "oracle.preds.json").read_text())  # <model>.<run id>.json
    assert sorted(graded["resolved_ids"]) == sorted(p["instance_id"] for p in first), graded
