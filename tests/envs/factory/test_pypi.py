"""One real PyPI project through ``envfarm tasks mine`` (network to PyPI on the host; slow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envfarm.cli import app

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_mine_one_task_from_python_slugify(tmp_path: Path) -> None:
    out = tmp_path / "slugify.jsonl"
    res = CliRunner().invoke(app, ["tasks", "mine", "--package", "python-slugify==9.2.0", "--instances",
                                   str(out), "--max-tasks", "1", "--max-mutants", "20"])
    assert res.exit_code == 0, res.output
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["repo"] == "pypi/python-slugify" and row["envfarm_source"]["sha256"]
    assert json.loads(row["FAIL_TO_PASS"]) and row["patch"].startswith("diff --git a/slugify/")
