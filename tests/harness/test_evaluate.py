"""evaluate() without docker: what a resumed run reruns, and errors that stop a run before it starts."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from envfarm.errors import HarnessError
from envfarm.harness import ErrorKind, Event, HarnessConfig, Instance, Outcome, Prediction, evaluate
from envfarm.harness.grading import error_report
from envfarm.harness.instances import instance_from_row
from envfarm.harness.report import RunFolder
from envfarm.testing.toyrepo import PATCHES, row


def unknown(n: int) -> Instance:
    """A row of a repository no spec covers: evaluating it never reaches a sandbox or an image."""
    return instance_from_row({**row(f"o__unknown-{n}", "a" * 40), "repo": "o/unknown"})


@pytest.mark.parametrize("rerun_infra", [True, False])
def test_resume_reruns_setup_errors_keeps_model_failures(tmp_path: Path, rerun_infra: bool) -> None:
    """A missing spec or repository is fixed on the harness side: the same --run-id then evaluates the
    instance again. A patch that did not apply is the model's verdict and stays."""
    model_fail, setup_fail, infra_fail = unknown(1), unknown(2), unknown(3)
    insts = [model_fail, setup_fail, infra_fail]
    preds = {i.instance_id: Prediction(i.instance_id, "m", PATCHES["gold"]) for i in insts}
    folder = RunFolder(tmp_path, "r", "m")
    for inst, kind in [
        (model_fail, ErrorKind.PATCH_APPLY),
        (setup_fail, ErrorKind.SPEC),
        (infra_fail, ErrorKind.ENV_TIMEOUT),
    ]:
        folder.write_report(error_report(inst.instance_id, "m", kind, "from the first run"))
    config = HarnessConfig(run_id="r", report_dir=tmp_path, backend="local", rerun_infra=rerun_infra)
    events: list[Event] = []
    run = asyncio.run(evaluate(insts, preds, config, progress=events.append))
    phases = {e.instance_id: e.phase for e in events if e.phase in ("skipped", "done")}
    assert phases == {
        model_fail.instance_id: "skipped",
        setup_fail.instance_id: "done",
        infra_fail.instance_id: "done" if rerun_infra else "skipped",
    }
    again = run.reports[setup_fail.instance_id]
    assert again.error_kind is ErrorKind.SPEC and "o__unknown.toml" in (again.error or "")
    assert run.reports[model_fail.instance_id].error == "from the first run"


def test_empty_patches_are_counted_not_run(tmp_path: Path) -> None:
    insts = [unknown(1), unknown(2)]
    preds = {
        insts[0].instance_id: Prediction(insts[0].instance_id, "m", ""),
        insts[1].instance_id: Prediction(insts[1].instance_id, "m", None),
    }
    config = HarnessConfig(run_id="r", report_dir=tmp_path, backend="local")
    run = asyncio.run(evaluate(insts, preds, config))
    assert {r.outcome for r in run.reports.values()} == {Outcome.EMPTY_PATCH}, "no spec needed: never run"
    assert run.summary.empty_patch_instances == 2 and run.summary.completed_instances == 0


def test_an_unwritable_report_dir_is_one_harness_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    inst = unknown(1)
    config = HarnessConfig(run_id="r", report_dir=tmp_path / "file" / "r", backend="local")
    with pytest.raises(HarnessError, match="pass a writable --report-dir"):
        asyncio.run(evaluate([inst], {inst.instance_id: Prediction(inst.instance_id, "m", "x")}, config))
