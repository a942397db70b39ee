"""grade(): swebench's own parsers and resolution status, plus envfarm's tamper rule (upstream swebench
issue 631)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from envfarm.harness import Instance, InstanceReport, Outcome, ResolutionStatus, _swebench, grade
from envfarm.harness.grading import ErrorKind, error_report
from envfarm.testing.toyrepo import PATCHES

F2P = ("tests/test_ops.py::test_mul", "tests/test_ops.py::test_div")
P2P = ("tests/test_ops.py::test_add", "tests/test_ops.py::test_add_negative")


def log(passed: tuple[str, ...], failed: tuple[str, ...] = (), exit_code: int | None = None) -> str:
    lines = [f"PASSED {t}" for t in passed] + [f"FAILED {t} - assert 0" for t in failed]
    code = (1 if failed else 0) if exit_code is None else exit_code
    return (
        ">>>>> Start Test Output\n" + "\n".join(lines) + f"\n>>>>> End Test Output\n"
        f">>>>> Test Exit Code: {code}\n"
    )


def test_full_partial_no(toy_instance: Instance) -> None:
    full = grade(toy_instance, log(F2P + P2P), model_patch=PATCHES["gold"], model_name_or_path="m")
    assert full.resolved and full.status is ResolutionStatus.FULL and full.patch_applied
    assert full.tests is not None and full.tests.fail_to_pass_success == F2P and full.test_exit_code == 0
    partial = grade(toy_instance, log(F2P[:1] + P2P, F2P[1:]), model_patch=PATCHES["half"])
    assert partial.outcome is Outcome.UNRESOLVED and partial.status is ResolutionStatus.PARTIAL
    assert partial.tests is not None and partial.tests.fail_to_pass_failure == F2P[1:]
    broke = grade(toy_instance, log(F2P + P2P[:1], P2P[1:]), model_patch=PATCHES["gold"])
    assert broke.status is ResolutionStatus.NO and not broke.resolved
    missing = grade(toy_instance, log(P2P), model_patch=PATCHES["gold"])  # an F2P test that never ran fails
    assert missing.status is ResolutionStatus.NO


def test_logs_swebench_will_not_grade(toy_instance: Instance, tmp_path: Path) -> None:
    liar = grade(toy_instance, log(F2P + P2P, exit_code=1), model_patch=PATCHES["gold"])
    assert not liar.resolved and not liar.patch_applied, "a non-zero exit with no failure is not believed"
    timed_out = log(F2P + P2P) + ">>>>> Tests Timed Out after 5s\n"
    assert not grade(toy_instance, timed_out, model_patch=PATCHES["gold"]).patch_applied
    no_markers = "PASSED tests/test_ops.py::test_mul\n"
    assert not grade(toy_instance, no_markers, model_patch=PATCHES["gold"]).resolved
    path = tmp_path / "test_output.txt"
    path.write_text(log(F2P + P2P))
    assert grade(toy_instance, path, model_patch=PATCHES["gold"]).resolved, (
        "a Path is read, not graded as text"
    )


def _upstream_spec(sw: Any, inst: Instance) -> Any:
    """swebench's own TestSpec for the toy instance, to compare with its get_eval_report."""
    return sw.types.TestSpec(
        instance_id=inst.instance_id, image="", eval_script_list=[], repo=inst.repo, version="0.1",
        FAIL_TO_PASS=list(F2P), PASS_TO_PASS=list(P2P), log_parser="parse_log_pytest",
        eval_type="pass_and_fail",
    )


def _prediction(inst: Instance, patch: str) -> dict[str, str]:
    return {"instance_id": inst.instance_id, "model_name_or_path": "m", "model_patch": patch}


def test_conftest_exploit_is_not_resolved_where_swebench_resolves_it(
    toy_instance: Instance, tmp_path: Path
) -> None:
    """Upstream swebench issue 631: the log of a run with the flipping conftest.py in place says every test
    passed."""
    exploited = log(F2P + P2P)
    path = tmp_path / "test_output.txt"
    path.write_text(exploited)
    sw = _swebench.load()
    spec = _upstream_spec(sw, toy_instance)
    pred = _prediction(toy_instance, PATCHES["conftest"])
    upstream = sw.grading.get_eval_report(spec, pred, str(path), include_tests_status=True)
    assert upstream[toy_instance.instance_id]["resolved"] is True, "swebench 5.0.2 resolves it"
    ours = grade(toy_instance, path, model_patch=PATCHES["conftest"])
    assert not ours.resolved and ours.status is ResolutionStatus.NO
    assert [(f.rule, f.path, f.action) for f in ours.findings] == [("conftest", "conftest.py", "flagged")]
    reverted = grade(toy_instance, path, model_patch=PATCHES["conftest"], findings=[])
    assert reverted.resolved, "findings=[] means the runner already reverted what it found"


def test_swebench_log_classification_and_its_environment_tier(toy_instance: Instance, tmp_path: Path) -> None:
    """A log with no test output: swebench's classify_logs reason and tier carry over (``infra_failure``)."""
    sw = _swebench.load()
    spec = _upstream_spec(sw, toy_instance)
    pred = _prediction(toy_instance, PATCHES["gold"])
    for text, reason, infra in [
        ("Killed\n", "out_of_memory", True),
        ("collected 0 items\nno tests ran\n", "no_tests_collected", False),
    ]:
        path = tmp_path / f"{reason}.txt"
        path.write_text(text)
        upstream = sw.grading.get_eval_report(spec, pred, str(path), include_tests_status=True)
        ours = grade(toy_instance, path, model_patch=PATCHES["gold"]).to_swebench()[toy_instance.instance_id]
        assert (ours["infra_failure"], ours["infra_failure_reason"]) == (infra, reason)
        assert ours["infra_failure"] == upstream[toy_instance.instance_id]["infra_failure"]


def test_empty_and_error_reports_and_json_round_trip(toy_instance: Instance) -> None:
    for patch in (None, "", "  \n"):
        empty = grade(toy_instance, "", model_patch=patch, model_name_or_path="m")
        assert empty.outcome is Outcome.EMPTY_PATCH and not empty.resolved
        assert empty.to_swebench()[toy_instance.instance_id]["patch_is_None"] is (patch is None)
    graded = grade(toy_instance, log(F2P + P2P), model_patch=PATCHES["gold"], model_name_or_path="m")
    err = error_report("x-1", "m", ErrorKind.ENV_TIMEOUT, "ran past 5s, the base too", attempts=2)
    assert err.infra_error and err.outcome is Outcome.ERROR and not ErrorKind.PATCH_APPLY.infra
    assert not ErrorKind.TIMEOUT.infra and not ErrorKind.OOM.infra, "the patch's hang is a model failure"
    for report in (graded, err, grade(toy_instance, log(F2P + P2P), model_patch=PATCHES["conftest"])):
        data = json.loads(json.dumps(report.to_swebench()))
        assert InstanceReport.from_swebench(data) == report
    keys = set(graded.to_swebench()[toy_instance.instance_id])
    assert {"patch_is_None", "patch_exists", "patch_successfully_applied", "resolved", "tests_status"} <= keys


def test_grading_imports_none_of_swebenchs_heavy_dependencies() -> None:
    code = (
        "import sys\n"
        "from envfarm.harness import _swebench\n"
        "sw = _swebench.load()\n"
        "heavy = ('datasets', 'modal', 'swebench.harness.docker_utils',"
        " 'swebench.harness.modal_eval', 'swebench.harness.reporting', 'swebench.harness.run_evaluation')\n"
        "print(sorted(m for m in heavy if m in sys.modules), len(sw.log_parsers.PARSER_REGISTRY))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("[] ") and int(out.split()[1]) > 50, out  # (bench/, not tests, times imports)


def test_a_script_named_swebench_first_on_sys_path_does_not_hide_the_package(tmp_path: Path) -> None:
    """``python bench/exploits.py`` puts bench/ first on sys.path, and bench/swebench.py is a script there."""
    (tmp_path / "swebench.py").write_text("print('a script, not the package')\n")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from envfarm.harness import _swebench; "
            "print(_swebench.load().grading.__name__)")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("swebench.harness.grading")
