"""``envfarm harbor validate``'s verdicts and reports (envs/harbor/validate.py): the reason a task gets from
what its runs gave, the markdown table, and the per-task rows a run with the same id resumes from."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from envfarm.envs.harbor.validate import (
    REASONS,
    TaskRow,
    ValidateConfig,
    _resumed,
    _Runs,
    _write_row,
    judge,
    markdown,
    write_reports,
)
from envfarm.errors import ConfigError


def runs(oracle: list[float], noop: float | None = 0.0, info: dict[str, str] | None = None) -> _Runs:
    return _Runs(oracle=oracle, noop=noop, infos=[info or {}])


@pytest.mark.parametrize(("given", "has_oracle", "reason"), [
    (runs([1.0]), True, None),
    (runs([], noop=0.0), False, None),
    (runs([1.0, 0.0]), True, "flaky"),
    (runs([1.0], noop=1.0), True, "verifier-failed"),
    (runs([], noop=1.0), False, "verifier-failed"),
    (runs([0.0], info={"reason": "verifier timeout after 60 s"}), True, "timeout"),
    (runs([0.0], info={"reason": "reward file missing: /logs/verifier/reward.txt"}), True, "verifier-failed"),
    (runs([0.0], info={"verifier_output": "curl: (6) Could not resolve host: example.org"}), True,
     "needs-network"),
    (runs([0.0], info={"verifier_output": "FAILED test_outputs.py::test_area"}), True, "oracle-failed"),
    (runs([0.0], info={"verifier_output": "FAILED test_outputs.py::test_area\n=== 1 failed in 0.1s ===\n"
                                          "curl: (6) Could not resolve host: x.sh"}), True, "oracle-failed"),
])
def test_judge_names_one_reason_from_the_list(given: _Runs, has_oracle: bool, reason: str | None) -> None:
    got, detail = judge(given, has_oracle=has_oracle)
    assert got == reason
    assert got is None or got in REASONS
    if reason == "oracle-failed":
        assert "FAILED test_outputs.py::test_area" in detail


def test_reports_hold_every_row_and_count_reasons(tmp_path: Path) -> None:
    rows = (TaskRow("a", True, 1.0, 0.0, None, "", 3.0, "3.11"),
            TaskRow("b", False, None, None, "needs-network", "RUN curl https://x | sh", 0.1),
            TaskRow("c", True, 0.0, 0.0, "oracle-failed", "a | b", 4.0, "3.13", internet_requested=True))
    json_path, md_path = write_reports(tmp_path, "r1", rows)
    data = json.loads(json_path.read_text())
    assert data["run_id"] == "r1"
    assert [r["task"] for r in data["rows"]] == ["a", "b", "c"]
    assert set(data["rows"][0]) >= {"task", "built", "oracle_reward", "noop_reward", "reason", "detail",
                                    "seconds"}
    text = md_path.read_text()
    assert "3 tasks: 2 built; oracle 1 on 1 of 2 with a solution" in text
    assert "| needs-network | 1 |" in text and "| oracle-failed | 1 |" in text
    assert "| c | yes | 0 | 0 | 3.13 | oracle-failed | a / b | 4.0 |" in markdown("r1", rows)
    broken = TaskRow("d", True, 0.0, 0.0, "task-incomplete", "reads /tests/data/x", 4.0, "3.11")
    summary = "oracle 1 on 1 of 3 with a solution (1 of 2 without a task defect)"
    assert summary in markdown("r1", [*rows, broken])


def test_the_build_rate_leaves_out_tasks_that_need_more_than_debian_and_pypi() -> None:
    from envfarm.sandbox.harbor_image import NO_PACKAGE

    rows = [TaskRow("a", True, None, 0.0, None, "", 3.0, "3.11"),
            TaskRow("b", True, None, 0.0, None, "", 3.0, "3.11"),
            TaskRow("c", False, None, None, "build-failed", "docker build failed: pip ...", 3.0),
            TaskRow("d", False, None, None, "build-failed", f"apt-get install x failed: {NO_PACKAGE} x", 3.0),
            TaskRow("e", False, None, None, "needs-network", "RUN curl https://x | sh", 0.1),
            TaskRow("f", False, None, None, "unsupported-base", "FROM node:20", 0.1)]
    assert "2 of the 3 tasks that need only Debian and PyPI packages built (66.7 %)." in markdown("r", rows)
    assert "need only Debian" not in markdown("r", rows[3:])


def test_a_written_row_is_what_a_resumed_run_reads(tmp_path: Path) -> None:
    row = TaskRow("org/task one", True, 1.0, 0.0, None, "", 2.5, "3.11", True)
    _write_row(tmp_path, row)
    assert asyncio.run(_resumed(tmp_path, "org/task one")) == row
    assert asyncio.run(_resumed(tmp_path, "another")) is None


def test_config_refuses_zero_workers_or_repeats(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="at least 1"):
        ValidateConfig(tasks=tmp_path, report_dir=tmp_path, max_workers=0)


ALWAYS_ONE = "#!/bin/bash\nmkdir -p /logs/verifier\necho 1 > /logs/verifier/reward.txt\n"


@pytest.mark.docker
def test_validate_builds_runs_and_resumes(tmp_path: Path) -> None:
    """Real images and sandboxes: a good task validates (oracle 1, no-op 0); a task without a solution has
    no oracle; a verifier that passes anything is verifier-failed; a Dockerfile that downloads is
    needs-network before any build; a second run with the same id reads the rows back."""
    from harbor_tasks import write_task

    from envfarm.envs.harbor.validate import validate_tasks

    tasks = tmp_path / "tasks"
    write_task(tasks, "good")
    write_task(tasks, "no-solution", solve=False)
    write_task(tasks, "lenient", test_sh=ALWAYS_ONE)
    offline = write_task(tasks, "downloads")
    (offline / "environment" / "Dockerfile").write_text(
        "FROM python:3.11-slim\nRUN curl -fsSL https://example.org/tool.sh | sh\nWORKDIR /workspace\n")
    config = ValidateConfig(tasks=tasks, report_dir=tmp_path / "r", run_id="t", max_workers=2)
    result = asyncio.run(validate_tasks(config))
    rows = {r.task: r for r in result.rows}
    assert (rows["good"].built, rows["good"].oracle_reward, rows["good"].noop_reward) == (True, 1.0, 0.0)
    assert rows["good"].validated and rows["good"].python == "3.11"
    assert rows["no-solution"].validated and rows["no-solution"].oracle_reward is None
    assert rows["lenient"].reason == "verifier-failed" and rows["lenient"].noop_reward == 1.0
    assert rows["downloads"].reason == "needs-network" and not rows["downloads"].built
    assert "curl" in rows["downloads"].detail
    data = json.loads(result.json_path.read_text())
    assert [r["task"] for r in data["rows"]] == ["downloads", "good", "lenient", "no-solution"]
    again = asyncio.run(validate_tasks(config))
    assert again.rows == result.rows


def test_a_build_error_keeps_the_line_that_says_what_failed() -> None:
    from envfarm.envs.harbor.validate import error_detail

    text = ("task 't': build-failed: docker build of envfarm/harbor-t:1 failed:\n ---> 1043d8ed9c5a\n"
            "Step 11/28 : COPY [\"context/data/x.csv\", \"/app/data/x.csv\"]\n"
            "COPY failed: file not found in build context\nfix: correct the recipe\nfix: read the log\n")
    detail = error_detail(text)
    assert detail.startswith("task 't': build-failed") and detail.endswith("COPY failed: file not found in "
                                                                           "build context")


def test_reports_name_the_tasks_folder_by_placeholder(tmp_path: Path) -> None:
    from envfarm.envs.harbor.validate import _placeholder

    detail = f"{tmp_path.resolve()}/t/tests/test.sh is missing"
    row = TaskRow("t", False, None, None, "verifier-failed", detail, 0.0)
    assert _placeholder(row, tmp_path).detail == "TASKS/t/tests/test.sh is missing"


def test_temporary_folders_are_written_by_placeholder(tmp_path: Path) -> None:
    from envfarm.envs.harbor.validate import placeholders

    text = ("FAILED /tmp/envfarm-verify-1f990ec9b0/tests/test_outputs.py::t[/tmp/tmpab_c1/x.csv] | "
            f"Processing /tmp/envfarm-wheelhouse/pytest-8.4.1.whl | {tmp_path}/t/instruction.md")
    assert placeholders(text, tmp_path) == ("FAILED VERIFY/tests/test_outputs.py::t[TMP/x.csv] | Processing "
                                            "WHEELHOUSE/pytest-8.4.1.whl | TASKS/t/instruction.md")
    cut = "mp/envfarm-verify-9990ef18/tests/a.py::t | FAILED ../../tmp/envfarm-verify-9990ef18/tests/a.py::u"
    assert placeholders(cut, tmp_path) == "VERIFY/tests/a.py::t | FAILED VERIFY/tests/a.py::u"


def test_the_janitor_runs_small_apt_groups_first(tmp_path: Path) -> None:
    from harbor_tasks import write_task

    from envfarm.envs.harbor.janitor import Janitor, apt_group

    folders = []
    for name, packages in (("a", "jq"), ("b", ""), ("c", "jq"), ("d", "sqlite3 jq")):
        folder = write_task(tmp_path, name)
        install = f"RUN apt-get update && apt-get install -y {packages}\n" if packages else ""
        (folder / "environment" / "Dockerfile").write_text(f"FROM python:3.11-slim\n{install}WORKDIR /app\n")
        folders.append(folder)
    assert {"jq", "sqlite3"} <= set(apt_group(folders[3])) and "jq" not in apt_group(folders[1])
    assert apt_group(folders[0]) == apt_group(folders[2]) == tuple(sorted(apt_group(folders[0])))
    order, _ = asyncio.run(Janitor.plan(folders))
    assert {f.name for f in order[:2]} == {"b", "d"} and [f.name for f in order[2:]] == ["a", "c"]


def _stub_builds(monkeypatch: pytest.MonkeyPatch, slow_s: float, quick_s: float) -> list[tuple[str, str]]:
    """Builds that take ``slow_s`` for the task named "slow" and ``quick_s`` for any other, and removals
    that do nothing: the events, in order, of both ("start"/"end" with the task, "removed" with the tag)."""
    import threading
    import time
    from types import SimpleNamespace

    from envfarm.sandbox import harbor_image

    events: list[tuple[str, str]] = []
    guard = threading.Lock()

    def build(folder: Path, on_layer: object = None) -> SimpleNamespace:
        with guard:
            events.append(("start", folder.name))
        time.sleep(slow_s if folder.name == "slow" else quick_s)
        with guard:
            events.append(("end", folder.name))
        return SimpleNamespace(tag=f"img-{folder.name}", image_id=f"id-{folder.name}")

    monkeypatch.setattr(harbor_image, "ensure_task_image", build)
    monkeypatch.setattr(harbor_image, "discard", lambda tag: events.append(("removed", tag)) or 0)
    return events


async def _build_and_done(janitor: Any, folder: Path) -> None:
    await janitor.build(folder)
    await janitor.done(folder)


def test_the_janitor_builds_side_by_side_and_removes_only_between_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long build does not hold another back, and a finished task's image is removed only once no build
    is in flight (a removal must not pull a layer from under one). Builds are stubs: the janitor's order
    of events is under test; the docker test below prunes for real."""
    from harbor_tasks import write_task

    from envfarm.envs.harbor.janitor import Janitor

    events = _stub_builds(monkeypatch, slow_s=0.4, quick_s=0.05)
    folders = [write_task(tmp_path, name) for name in ("slow", "fast")]

    async def run() -> None:
        _, janitor = await Janitor.plan(folders)
        await asyncio.gather(*(_build_and_done(janitor, f) for f in folders))

    asyncio.run(run())
    assert events.index(("start", "fast")) < events.index(("end", "slow"))  # side by side
    assert events.index(("removed", "img-fast")) > events.index(("end", "slow"))  # waited for it
    assert events[-2:] == [("removed", "img-fast"), ("removed", "img-slow")]


def test_a_long_build_holds_back_at_most_the_queue_limit_of_removals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One worker builds for long while the other goes through short tasks: their removals queue up to
    ``QUEUE_LIMIT``; then the next build waits for the long one, the queue empties, and work goes on."""
    from harbor_tasks import write_task

    from envfarm.envs.harbor import janitor as janitor_module

    events = _stub_builds(monkeypatch, slow_s=0.6, quick_s=0.01)
    monkeypatch.setattr(janitor_module, "QUEUE_LIMIT", 3)
    slow = write_task(tmp_path, "slow")
    quick = [write_task(tmp_path, f"quick{i}") for i in range(6)]

    async def run() -> None:
        _, janitor = await janitor_module.Janitor.plan([slow, *quick])

        async def quick_ones() -> None:
            await asyncio.sleep(0.05)  # the slow build is in flight first
            for folder in quick:
                await _build_and_done(janitor, folder)

        await asyncio.gather(_build_and_done(janitor, slow), quick_ones())

    asyncio.run(run())
    slow_end = events.index(("end", "slow"))
    assert [e for e in events[:slow_end] if e[0] == "start" and e[1] != "slow"] == [
        ("start", f"quick{i}") for i in range(3)]  # three removals queued, the fourth build waited
    assert [e for e in events[:slow_end] if e[0] == "removed"] == []
    assert sorted(t for kind, t in events if kind == "removed") == sorted(
        f"img-{f.name}" for f in [slow, *quick])


@pytest.mark.docker
def test_pruning_removes_each_groups_images_and_exports_once_its_rows_are_written(tmp_path: Path) -> None:
    """``--prune-images`` on bwrap: the rows are those of a plain run, and afterwards docker has no task's
    image nor the pip layer two of them shared, the rootfs folder holds no export of them and the wheelhouse
    cache not the folder those two installed from."""
    import uuid

    from harbor_tasks import write_task

    from envfarm.envs.harbor.validate import validate_tasks
    from envfarm.sandbox import dockerutil, imagebuild, rootfs
    from envfarm.sandbox.dockerfile import translate
    from envfarm.sandbox.harbor_image import wheelhouses

    tag = uuid.uuid4().hex[:8]
    tasks = tmp_path / "tasks"
    template = f"FROM python:3.11-slim\nENV MARK={tag}\nRUN pip install six==1.16.0\nWORKDIR /workspace\n"
    for name in (f"prune-a-{tag}", f"prune-b-{tag}", f"prune-c-{tag}"):
        write_task(tasks, name)
        if not name.startswith("prune-a"):  # b and c share a pip layer
            (tasks / name / "environment" / "Dockerfile").write_text(template)
    config = ValidateConfig(tasks=tasks, report_dir=tmp_path / "r", run_id="p", prune_images=True)
    result = asyncio.run(validate_tasks(config))
    assert [(r.validated, r.oracle_reward, r.noop_reward) for r in result.rows] == [(True, 1.0, 0.0)] * 3
    left = [t for img in dockerutil.client().images.list() for t in img.tags if tag in t]
    pip_layers = dockerutil.client().images.list(filters={"label": "envfarm.harbor=pip"})
    left += [img.id for img in pip_layers if f"MARK={tag}" in (img.attrs["Config"].get("Env") or [])]
    assert left == []
    wheels = wheelhouses(translate(template))
    assert len(wheels) == 1 and not (imagebuild.wheelhouse_dir() / wheels[0]).exists()
    exports = [rootfs.read_marker(p) for p in rootfs.rootfs_dir().glob("img-*") if p.is_dir()]
    assert [m for m in exports if m and tag in str(m.get("name"))] == []


# ------------------------------------------------------------------------------------------------ --sample


def test_a_sample_is_the_same_for_the_same_seed_and_all_when_it_asks_for_more(tmp_path: Path) -> None:
    from envfarm.envs.harbor.validate import sample_dirs

    folders = [tmp_path / f"t{i:02d}" for i in range(20)]
    shuffled = folders[7:] + folders[:7]
    picked = sample_dirs(folders, 5, seed=1)
    assert len(picked) == 5 and picked == sorted(picked) and set(picked) <= set(folders)
    assert sample_dirs(shuffled, 5, seed=1) == picked  # drawn from the names sorted, not the given order
    assert {tuple(sample_dirs(folders, 5, seed=s)) for s in range(5)} != {tuple(picked)}
    assert sample_dirs(folders, 5) == sample_dirs(folders, 5, seed=0)
    assert sample_dirs(shuffled, 20, seed=3) == sample_dirs(shuffled, 99) == folders
    assert sample_dirs(shuffled, None) == folders


def test_config_refuses_an_empty_sample(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="sample must be at least 1"):
        ValidateConfig(tasks=tmp_path, report_dir=tmp_path, sample=0)


CURLS = "FROM python:3.11-slim\nRUN curl -fsSL https://example.org/tool.sh | sh\n"


def test_a_sampled_run_records_its_sample_and_resumes_the_same_tasks(tmp_path: Path) -> None:
    """Tasks that download in their Dockerfile stop before any build, so no docker is needed here."""
    from harbor_tasks import write_task

    from envfarm.envs.harbor.validate import Sample, sample_dirs, validate_tasks

    tasks = tmp_path / "tasks"
    for i in range(6):
        (write_task(tasks, f"t{i}") / "environment" / "Dockerfile").write_text(CURLS)
    config = ValidateConfig(tasks=tasks, report_dir=tmp_path / "r", task_ids=("t0", "t1", "t2", "t3", "t4"),
                            run_id="s", sample=2, seed=7)
    result = asyncio.run(validate_tasks(config))
    expected = [f.name for f in sample_dirs([tasks / f"t{i}" for i in range(5)], 2, seed=7)]
    assert [r.task for r in result.rows] == expected
    assert {r.reason for r in result.rows} == {"needs-network"}
    assert result.sample == Sample(n=2, seed=7, of=5)
    data = json.loads(result.json_path.read_text())
    assert data["sample"] == {"n": 2, "seed": 7, "of": 5} and len(data["rows"]) == 2
    assert "a random sample of 2 of 5 tasks (seed 7): 0 built;" in result.markdown_path.read_text()
    assert asyncio.run(validate_tasks(config)).rows == result.rows
    whole = asyncio.run(validate_tasks(ValidateConfig(tasks=tasks, report_dir=tmp_path / "w")))
    assert json.loads(whole.json_path.read_text())["sample"] is None and whole.sample is None
    assert "6 tasks: 0 built;" in whole.markdown_path.read_text()


@pytest.mark.docker
@pytest.mark.slow
def test_the_command_validates_a_sample_of_one(tmp_path: Path) -> None:
    """Real: ``harbor validate --sample 1`` over the two tasks of tests/envs/harbor/tasks (their images are
    the env tests' too) builds and runs one of them and says so."""
    from typer.testing import CliRunner

    from envfarm.cli import app

    tasks = Path(__file__).parent / "tasks"
    res = CliRunner().invoke(app, ["harbor", "validate", "--tasks", str(tasks), "--report-dir",
                                   str(tmp_path / "r"), "--sample", "1", "--seed", "0"])
    assert res.exit_code == 0, res.output
    assert "a random sample of 1 of 2 tasks (seed 0)" in res.output and "validated 1/1" in res.output
    data = json.loads((tmp_path / "r" / "validate.json").read_text())
    assert data["sample"] == {"n": 1, "seed": 0, "of": 2}
    assert [(r["oracle_reward"], r["noop_reward"]) for r in data["rows"]] == [(1.0, 0.0)]


def test_a_daemon_that_does_not_answer_stops_the_run_and_writes_no_row(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine's fault is not the task's: no ``build-failed`` row is recorded (a resumed run would
    keep it), the run stops with the typed error that says to run ``make setup``."""
    from harbor_tasks import write_task

    from envfarm.envs.harbor.validate import validate_tasks
    from envfarm.errors import BackendUnavailable
    from envfarm.sandbox import dockerutil

    tasks = tmp_path / "tasks"
    write_task(tasks, "good")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    dockerutil.reset()  # the client cached by earlier tests talks to the real daemon
    config = ValidateConfig(tasks=tasks, report_dir=tmp_path / "r", run_id="t", max_workers=1)
    try:
        with pytest.raises(BackendUnavailable, match="make setup"):
            asyncio.run(validate_tasks(config))
    finally:
        dockerutil.reset()
    assert not list((tmp_path / "r" / "runs" / "t").glob("*.json"))
