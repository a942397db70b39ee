"""``envfarm harbor check`` (envs/harbor/check.py): per task, without building or running anything, does it
load, does its Dockerfile build offline here (else validate's reason and detail), has it an oracle, does it
ask for internet; the JSON report and the command line."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from harbor_tasks import write_task
from typer.testing import CliRunner

from envfarm.cli import app
from envfarm.envs.harbor.check import check_tasks, static_reason, write_report
from envfarm.envs.harbor.validate import ValidateConfig, _loaded_and_validated

CURL = "FROM python:3.11-slim\nRUN curl -fsSL https://example.org/tool.sh | sh\nWORKDIR /workspace\n"
ALPINE = "FROM alpine:3.19\nRUN apk add --no-cache bash\nWORKDIR /workspace\n"


def mixed_tasks(root: Path) -> Path:
    """Five tasks: offline, offline without a solution asking for internet, one that curls a URL, one on
    an unsupported base, one without tests/test.sh."""
    tasks = root / "tasks"
    write_task(tasks, "a-offline")
    write_task(tasks, "b-no-oracle", solve=False, internet=True)
    (write_task(tasks, "c-curls") / "environment" / "Dockerfile").write_text(CURL)
    (write_task(tasks, "d-alpine") / "environment" / "Dockerfile").write_text(ALPINE)
    (write_task(tasks, "e-no-tests") / "tests" / "test.sh").unlink()
    return tasks


def test_check_gives_each_task_offline_or_its_static_reason(tmp_path: Path) -> None:
    tasks = mixed_tasks(tmp_path)
    seen: list[str] = []
    result = check_tasks(tasks, progress=lambda row: seen.append(row.task))
    rows = {r.task: r for r in result.rows}
    assert seen == ["a-offline", "b-no-oracle", "c-curls", "d-alpine", "e-no-tests"]
    assert [(n, r.offline, r.reason) for n, r in rows.items()] == [
        ("a-offline", True, None), ("b-no-oracle", True, None), ("c-curls", False, "needs-network"),
        ("d-alpine", False, "unsupported-base"), ("e-no-tests", False, "verifier-failed")]
    assert rows["a-offline"].has_oracle and not rows["a-offline"].internet_requested
    assert not rows["b-no-oracle"].has_oracle and rows["b-no-oracle"].internet_requested
    assert "line 2" in rows["c-curls"].detail and "curl" in rows["c-curls"].detail
    assert "alpine:3.19" in rows["d-alpine"].detail
    assert rows["e-no-tests"].detail.startswith("TASKS/e-no-tests/tests/test.sh is missing")
    assert rows["e-no-tests"].has_oracle  # the folder has solution/solve.sh though it does not load
    assert (result.offline, result.with_oracle) == (2, 4)
    assert dict(result.reasons) == {"needs-network": 1, "unsupported-base": 1, "verifier-failed": 1}


def test_check_names_the_reason_and_detail_validate_gives_before_any_build(tmp_path: Path) -> None:
    """The static reasons are found before validate's build step touches docker, so validate's own rows
    for these tasks need no daemon: check's rows say the same."""
    tasks = mixed_tasks(tmp_path)
    (write_task(tasks, "f-no-dockerfile") / "environment" / "Dockerfile").unlink()
    config = ValidateConfig(tasks=tasks, report_dir=tmp_path / "r")
    checked = {r.task: r for r in check_tasks(tasks).rows}
    for name in ("c-curls", "d-alpine", "e-no-tests", "f-no-dockerfile"):
        row = asyncio.run(_loaded_and_validated(tasks / name, config, None))
        expected = (row.reason, row.detail.replace(str(tasks), "TASKS"))
        assert (checked[name].reason, checked[name].detail) == expected, name
    assert checked["f-no-dockerfile"].reason == "build-failed"
    assert static_reason(tasks / "a-offline") is None


def test_the_json_report_holds_counts_and_rows_with_the_tasks_folder_as_a_placeholder(tmp_path: Path) -> None:
    tasks = mixed_tasks(tmp_path)
    path = write_report(check_tasks(tasks, task_ids=("c-curls", "e-no-tests", "a-offline")),
                        tmp_path / "out" / "check.json")
    data = json.loads(path.read_text())
    assert set(data) == {"tasks", "offline", "reasons", "rows"}
    assert (data["tasks"], data["offline"]) == (3, 1)
    assert data["reasons"] == {"needs-network": 1, "verifier-failed": 1}
    assert [r["task"] for r in data["rows"]] == ["a-offline", "c-curls", "e-no-tests"]
    assert set(data["rows"][0]) == {"task", "offline", "reason", "detail", "has_oracle", "internet_requested"}
    assert str(tmp_path) not in path.read_text() and "TASKS/e-no-tests" in path.read_text()


def test_the_command_prints_the_counts_and_writes_the_report(tmp_path: Path) -> None:
    tasks = mixed_tasks(tmp_path)
    report = tmp_path / "check.json"
    res = CliRunner().invoke(app, ["harbor", "check", "--tasks", str(tasks), "--report", str(report)])
    assert res.exit_code == 0, res.output
    assert "5 tasks: 2 offline, 3 not; 4 with an oracle" in res.output
    for reason in ("offline", "needs-network", "unsupported-base", "verifier-failed"):
        assert reason in res.output
    assert json.loads(report.read_text())["tasks"] == 5
    printed = CliRunner().invoke(app, ["harbor", "check", "--tasks", str(tasks), "--task-ids", "c-curls",
                                       "--json"])
    assert printed.exit_code == 0, printed.output
    assert json.loads(printed.stdout)["reasons"] == {"needs-network": 1}
    # ids as every envfarm command takes them: after the flag, space-separated, quoted or with commas
    for ids in (["c-curls", "a-offline"], ["c-curls a-offline"], ["c-curls,a-offline"]):
        args = ["harbor", "check", "--tasks", str(tasks), "--task-ids", *ids, "--json"]
        got = CliRunner().invoke(app, args)
        assert got.exit_code == 0 and json.loads(got.stdout)["tasks"] == 2, (ids, got.output)


@pytest.mark.parametrize(("args", "says"), [
    (["--tasks", "{tmp}/nowhere"], "is not a folder"),
    (["--tasks", "{tmp}/tasks", "--task-ids", "c-curl"], "did you mean 'c-curls'?"),
])
def test_bad_input_is_one_clear_line_and_exit_code_2(tmp_path: Path, args: list[str], says: str) -> None:
    mixed_tasks(tmp_path)
    res = CliRunner().invoke(app, ["harbor", "check", *[a.format(tmp=tmp_path) for a in args]])
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], res.output
    assert "Traceback" not in res.output
