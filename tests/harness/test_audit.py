"""``envfarm harness audit`` (envfarm/testing/audit.py): the forgery suite and gold, graded for real on a
bundled code-repair row; no forgery resolves, gold still does, the reports say so per class. The grader-aware
class (5) also on two SWE-bench rows of two runners (pytest, sympy's bin/test), where canaries alone must
stop it."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envfarm.commands.harness import app
from envfarm.harness import HarnessConfig, load_instances
from envfarm.testing.audit import GRADER_AWARE_CLASS, AuditReport, Graded, audit, markdown

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
    assert set(data["by_class"]) == {"1", "2", "3", "4", "5"}
    assert all(c["resolved"] == 0 for c in data["by_class"].values())
    assert sum(c["graded"] for c in data["by_class"].values()) == len(data["graded"]) - 1 >= 20
    assert (tmp_path / "reports" / "a1" / "audit.md").is_file()


DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
SWEBENCH_ROWS = {"pytest-dev__pytest-7490": "swe-bench-lite", "sympy__sympy-20049": "swe-bench-lite"}
"""One row per runner (pytest, sympy's bin/test) whose test_patch adds the FAIL_TO_PASS tests the canaries
are copied from."""


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("row", sorted(SWEBENCH_ROWS))
def test_grader_aware_forgery_is_stopped_by_canaries_on_swebench_rows(row: str, tmp_path: Path) -> None:
    """Gold resolves; the grader-aware forgery does not, with canaries the only check of the run (the
    differential one off): a canary it forged is flagged, or a FAIL_TO_PASS test it took for a canary failed
    honestly. ENVFARM_MIRRORS names a folder of ``owner__name.git`` mirrors (needed to build the row's
    image)."""
    mirrors = os.environ.get("ENVFARM_MIRRORS")
    if not mirrors or not (DATA / SWEBENCH_ROWS[row]).is_dir():
        pytest.skip("set ENVFARM_MIRRORS to a folder of owner__name.git mirrors, and have SWE-bench's data")
    [inst] = load_instances(DATA / SWEBENCH_ROWS[row], [row])
    config = HarnessConfig(run_id=f"aware-{row}", report_dir=tmp_path, repo_source=Path(mirrors),
                           max_workers=1, differential=False)
    runner = "sympy" if row.startswith("sympy") else "pytest"
    report = asyncio.run(audit([inst], config, only=[f"{runner}-grader-aware"]))
    assert report.gold == {row: True}, report.graded
    [forged] = report.forged
    assert forged.forgery_class == GRADER_AWARE_CLASS and not forged.resolved, forged
