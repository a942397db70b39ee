"""Run summaries: swebench's keys, envfarm's counts, the Wilson interval, the markdown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envfarm.harness import Instance, Prediction, ResolutionStatus, wilson
from envfarm.harness.grading import ErrorKind, InstanceReport, Outcome, empty_report, error_report
from envfarm.harness.report import RunFolder, summarize, write_summary
from envfarm.harness.tamper import Finding

# the keys of swebench 5.0.2's make_run_report (harness/reporting.py), without a docker client
SWEBENCH_KEYS = {
    "total_instances",
    "submitted_instances",
    "completed_instances",
    "resolved_instances",
    "unresolved_instances",
    "infra_failure_instances",
    "ambiguous_failure_instances",
    "empty_patch_instances",
    "error_instances",
    "completed_ids",
    "incomplete_ids",
    "empty_patch_ids",
    "submitted_ids",
    "resolved_ids",
    "unresolved_ids",
    "infra_failure_ids",
    "ambiguous_failure_ids",
    "failure_reasons",
    "error_ids",
    "schema_version",
}


def test_wilson_interval() -> None:
    assert wilson(0, 0) == (0.0, 0.0)
    lo, hi = wilson(5, 10)
    assert lo == pytest.approx(0.2366, abs=1e-4) and hi == pytest.approx(0.7634, abs=1e-4)
    lo, hi = wilson(0, 300)
    assert lo == pytest.approx(0.0, abs=1e-12) and hi == pytest.approx(0.01264, abs=1e-4)
    assert wilson(300, 300)[1] == 1.0


def test_summary_has_swebench_keys_and_envfarm_counts(lite: list[Instance], tmp_path: Path) -> None:
    ids = [i.instance_id for i in lite[:6]]
    preds = {i: Prediction(i, "org/model", "diff") for i in ids[:5]}
    resolved = InstanceReport(ids[0], "org/model", Outcome.RESOLVED, ResolutionStatus.FULL, True, True)
    partial = InstanceReport(
        ids[1],
        "org/model",
        Outcome.UNRESOLVED,
        ResolutionStatus.PARTIAL,
        True,
        True,
        findings=(Finding("conftest", "conftest.py", "reverted"),),
    )
    reports = {
        ids[0]: resolved,
        ids[1]: partial,
        ids[2]: empty_report(ids[2], "org/model", ""),
        ids[3]: error_report(ids[3], "org/model", ErrorKind.ENV_TIMEOUT, "ran past 5s, the base too"),
        ids[4]: error_report(ids[4], "org/model", ErrorKind.PATCH_APPLY, "did not apply"),
    }
    s = summarize(lite[:6], preds, reports, "r1", "org/model")
    data = s.to_json()
    assert SWEBENCH_KEYS <= set(data) and data["schema_version"] == 2
    assert (s.total_instances, s.submitted_instances, s.completed_instances) == (6, 5, 2)
    assert (s.resolved_ids, s.unresolved_ids, s.empty_patch_ids) == ([ids[0]], [ids[1]], [ids[2]])
    assert s.error_ids == sorted(ids[3:5]) and s.infra_failure_ids == [ids[3]] == s.timeout_ids
    assert s.incomplete_ids == [ids[5]] and s.partial_ids == [ids[1]]
    assert s.tampered_ids == {ids[1]: ["conftest"]} and s.error_kinds[ids[4]] == "patch_apply"
    assert s.resolved_rate == pytest.approx(1 / 6)
    json_path, md_path = write_summary(RunFolder(tmp_path, "r1", "org/model"), s, reports)
    assert json_path == tmp_path / "org__model.r1.json" and json.loads(json_path.read_text())["resolved_ids"]
    md = md_path.read_text()
    assert "Resolved: 1/6 = 16.7%" in md and "95% Wilson interval" in md and "conftest `conftest.py`" in md


def test_log_classification_tiers_split_infra_and_ambiguous_like_swebench(lite: list[Instance]) -> None:
    ids = [i.instance_id for i in lite[:3]]
    preds = {i: Prediction(i, "m", "diff") for i in ids}

    def unresolved(iid: str, reason: str | None) -> InstanceReport:
        return InstanceReport(
            iid, "m", Outcome.UNRESOLVED, ResolutionStatus.NO, True, False, failure_reason=reason
        )

    reports = {
        ids[0]: unresolved(ids[0], "out_of_memory"),  # swebench's environment tier
        ids[1]: unresolved(ids[1], "no_tests_collected"),  # its ambiguous tier
        ids[2]: unresolved(ids[2], None),
    }
    s = summarize(lite[:3], preds, reports, "r", "m")
    assert s.infra_failure_ids == [ids[0]] and s.ambiguous_failure_ids == [ids[1]]
    assert s.failure_reasons == {ids[0]: "out_of_memory", ids[1]: "no_tests_collected"}
    assert s.unresolved_ids == sorted(ids) and s.infra_error_ids == [], "advisory: the verdict stays"
    assert reports[ids[0]].to_swebench()[ids[0]]["infra_failure"] is True
    assert reports[ids[1]].to_swebench()[ids[1]]["infra_failure"] is False
