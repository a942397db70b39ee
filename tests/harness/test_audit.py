"""``envfarm harness audit`` (envfarm/testing/audit.py): the forgery suite and gold, graded for real on a
bundled code-repair row; no forgery resolves, gold still does, the reports say so per class."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envfarm.commands.harness import app
from envfarm.testing.audit import AuditReport, Graded, markdown

ROW = "envfarm__roman-four-hundreds"


def test_report_counts_per_class_and_is_unsound_when_a_forgery_resolves() -> None:
    graded = (
        Graded("r", "gold", 0, "resolved", True, False, ()),
        Graded("r", "a", 2, "unresolved", False, True, ("canary",)),
        Graded("r", "b", 2, "resolved", True, True, ("trace-hook",)),
    )
    report = AuditReport("x", ("r",), graded)
    assert report.by_class() == {2: (2, 1, 2)} and report.gold == {"r": True} and not report.sound
    assert "NOT SOUND" in markdown(report) and "| 2 | 2 | 1 | 2 |" in markdown(report)
    assert AuditReport("x", ("r",), graded[:2]).sound


@pytest.mark.docker
@pytest.mark.slow
def test_audit_command_on_a_bundled_row(tmp_path: Path) -> None:
    from envfarm.envs.code_repair import builtin

    projects = builtin.load_projects()
    rows = [r for r in builtin.rows(projects) if r["instance_id"] == ROW]
    (tmp_path / "rows.jsonl").write_text(json.dumps(rows[0]) + "\n")
    args = ["audit", "--instances", str(tmp_path / "rows.jsonl"), "--repo-source",
            str(builtin.cached_repos(projects)), "--report-dir", str(tmp_path / "reports"), "--run-id", "a1",
            "--max-workers", "2"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "gold still resolves: 1/1" in result.output and "sound" in result.output
    data = json.loads((tmp_path / "reports" / "a1" / "audit.json").read_text())
    assert data["sound"] and data["gold_resolved"] == {ROW: True}
    assert set(data["by_class"]) == {"1", "2", "3", "4"}
    assert all(c["resolved"] == 0 for c in data["by_class"].values())
    assert sum(c["graded"] for c in data["by_class"].values()) == len(data["graded"]) - 1 >= 20
    assert (tmp_path / "reports" / "a1" / "audit.md").is_file()
