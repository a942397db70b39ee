"""The harness end to end on the real docker backend, with the toy repository (envfarm/testing/toyrepo.py).

Images are cached by content hash: the env image and the instance images are built once per machine (about
half a minute on two cores) and found again by later sessions; each instance then costs one sandbox start.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from envfarm.harness import (
    ErrorKind,
    Event,
    HarnessConfig,
    Instance,
    Outcome,
    Policy,
    Prediction,
    ResolutionStatus,
    RunReport,
    evaluate,
)
from envfarm.harness.images import PRISTINE, ImageBuilder
from envfarm.harness.instances import instance_from_row
from envfarm.harness.specs import SpecCatalog
from envfarm.sandbox import Limits, get_backend
from envfarm.testing.toyrepo import KEY, PATCHES, row

pytestmark = [pytest.mark.docker, pytest.mark.slow]

MAIN = ("gold", "fuzzy", "half", "bad", "conftest", "empty")


def instances(base: str, names: tuple[str, ...]) -> list[Instance]:
    return [instance_from_row(row(f"envfarm-tests__calc-{n}", base)) for n in names]


def predictions(insts: list[Instance], patches: dict[str, str] | None = None) -> dict[str, Prediction]:
    chosen = patches or PATCHES
    return {
        i.instance_id: Prediction(i.instance_id, "toy/model", chosen[i.instance_id.rsplit("-", 1)[1]])
        for i in insts
    }


def run(
    toy: tuple[Path, str, Path],
    out: Path,
    names: tuple[str, ...],
    events: list[Event] | None = None,
    patches: dict[str, str] | None = None,
    **cfg: object,
) -> RunReport:
    source, base, specs = toy
    insts = instances(base, names)
    options: dict[str, object] = {"run_id": "r1", "max_workers": 3, "timeout_s": 60, **cfg}
    config = HarnessConfig(report_dir=out, repo_source=source, specs=(specs,), **options)  # type: ignore[arg-type]
    sink = events if events is not None else []
    return asyncio.run(evaluate(insts, predictions(insts, patches), config, progress=sink.append))


@pytest.fixture(scope="module")
def main_run(toy: tuple[Path, str, Path], tmp_path_factory: pytest.TempPathFactory) -> RunReport:
    return run(toy, tmp_path_factory.mktemp("reports"), MAIN)


def test_outcomes_of_gold_fuzzy_half_bad_conftest_and_empty(main_run: RunReport) -> None:
    r = {iid.rsplit("-", 1)[1]: rep for iid, rep in main_run.reports.items()}
    assert r["gold"].resolved and r["gold"].status is ResolutionStatus.FULL
    assert r["gold"].extra["apply_command"] == "git apply --verbose"
    assert r["fuzzy"].resolved and r["fuzzy"].extra["apply_command"].startswith("patch --batch")
    assert r["half"].outcome is Outcome.UNRESOLVED and r["half"].status is ResolutionStatus.PARTIAL
    assert r["half"].tests is not None and r["half"].tests.fail_to_pass_failure == (
        "tests/test_ops.py::test_div",
    )
    assert r["bad"].outcome is Outcome.ERROR and r["bad"].error_kind is ErrorKind.PATCH_APPLY
    assert r["bad"].attempts == 1, "a model failure is not retried"
    assert r["conftest"].outcome is Outcome.UNRESOLVED and r["conftest"].status is ResolutionStatus.NO
    assert [(f.rule, f.path, f.action) for f in r["conftest"].findings] == [
        ("conftest", "conftest.py", "reverted")
    ]
    assert r["empty"].outcome is Outcome.EMPTY_PATCH
    s = main_run.summary
    assert (s.total_instances, s.completed_instances, s.resolved_instances) == (6, 4, 2)
    assert s.empty_patch_ids == ["envfarm-tests__calc-empty"] and s.error_ids == ["envfarm-tests__calc-bad"]
    assert s.partial_ids == ["envfarm-tests__calc-half"] and s.tampered_ids == {
        "envfarm-tests__calc-conftest": ["conftest"]
    }
    assert main_run.summary_path.name == "toy__model.r1.json" and main_run.markdown_path.is_file()
    folder = main_run.summary_path.parent / "r1" / "toy__model"
    assert not (folder / "envfarm-tests__calc-empty" / "test_output.txt").exists(), (
        "an empty patch is not run"
    )
    gold_log = (folder / "envfarm-tests__calc-gold" / "test_output.txt").read_text()
    assert ">>>>> Start Test Output" in gold_log and "PASSED tests/test_ops.py::test_mul" in gold_log
    assert (
        "tamper rule conftest: conftest.py (reverted)"
        in (folder / "envfarm-tests__calc-conftest" / "run_instance.log").read_text()
    )


def test_resume_skips_finished_instances(main_run: RunReport, toy: tuple[Path, str, Path]) -> None:
    folder = main_run.summary_path.parent
    stamps = {p: p.stat().st_mtime_ns for p in folder.glob("r1/toy__model/*/report.json")}
    events: list[Event] = []
    again = run(toy, folder, MAIN, events)
    assert {e.phase for e in events} == {"skipped"} and len(events) == len(MAIN)
    assert again.reports == main_run.reports
    assert stamps == {p: p.stat().st_mtime_ns for p in folder.glob("r1/toy__model/*/report.json")}


def test_endless_tests_are_a_model_failure_recorded_once(toy: tuple[Path, str, Path], tmp_path: Path) -> None:
    """The patch's tests loop; the unpatched base finishes well inside the budget: reason ``timeout``, no
    retry, counted (unresolved) in the denominator, and a resumed run keeps it."""
    events: list[Event] = []
    result = run(toy, tmp_path, ("loop",), events, timeout_s=4)
    report = result.reports["envfarm-tests__calc-loop"]
    assert report.outcome is Outcome.ERROR and report.error_kind is ErrorKind.TIMEOUT
    assert not report.infra_error and report.attempts == 1 and "retry" not in [e.phase for e in events]
    assert "unpatched base finishes in" in (report.error or "")
    assert result.summary.timeout_ids == ["envfarm-tests__calc-loop"] and not result.summary.infra_failure_ids
    assert result.summary.total_instances == 1 and result.summary.resolved_rate == 0.0
    log = (tmp_path / "r1" / "toy__model" / "envfarm-tests__calc-loop" / "test_output.txt").read_text()
    assert ">>>>> Tests Timed Out" in log
    again: list[Event] = []
    run(toy, tmp_path, ("loop",), again, timeout_s=4)
    assert [e.phase for e in again] == ["skipped"], "a model failure is not replayed on resume"


def test_a_budget_the_base_cannot_meet_is_an_infra_error_retried(
    toy: tuple[Path, str, Path], tmp_path: Path
) -> None:
    """The unpatched base times out too (the spec sleeps before the tests): the environment's fault."""
    source, base, _ = toy
    specs = tmp_path / "slow"
    specs.mkdir()
    (specs / "envfarm-tests__calc.toml").write_text(
        'repo = "envfarm-tests/calc"\n[defaults]\npackages = ["pytest==9.2.0"]\ntest_cmd = "pytest -rA"\n'
        'pre_test = ["sleep 60"]\n'
    )
    result = run((source, base, specs), tmp_path, ("gold",), timeout_s=2)
    report = result.reports["envfarm-tests__calc-gold"]
    assert report.error_kind is ErrorKind.ENV_TIMEOUT and report.infra_error and report.attempts == 2
    assert result.summary.infra_failure_ids == result.summary.timeout_ids == ["envfarm-tests__calc-gold"]


def test_oom_killed_tests_are_a_model_failure(toy: tuple[Path, str, Path], tmp_path: Path) -> None:
    result = run(toy, tmp_path, ("oom",), memory_mb=256, disk_mb=64)
    report = result.reports["envfarm-tests__calc-oom"]
    assert report.error_kind is ErrorKind.OOM and not report.infra_error and report.attempts == 1
    assert not result.summary.infra_failure_ids and not result.summary.timeout_ids


def test_test_output_brought_back_is_capped(toy: tuple[Path, str, Path], tmp_path: Path) -> None:
    """A patch that prints megabytes costs the host at most the cap; the summary at the end survives."""
    chatty = PATCHES["gold"].replace("+    return a * b", "+    print('x' * (3 << 20))\n+    return a * b")
    chatty = chatty.replace("@@ -3,8 +3,8 @@", "@@ -3,8 +3,9 @@")
    result = run(toy, tmp_path, ("chatty",), patches={"chatty": chatty}, output_cap_mb=1)
    report = result.reports["envfarm-tests__calc-chatty"]
    assert report.resolved, report
    assert report.extra["output_cut_bytes"] > 2 << 20
    log = (tmp_path / "r1" / "toy__model" / "envfarm-tests__calc-chatty" / "test_output.txt").read_text()
    assert len(log) < (1 << 20) + 4096 and "bytes of test output cut here" in log


def test_a_killed_sandbox_is_an_infra_error_retried(toy: tuple[Path, str, Path], tmp_path: Path) -> None:
    """A sandbox killed from outside during the tests is the infrastructure's fault: retried, then an
    infra error (never a model failure, never a verdict)."""
    import docker

    client = docker.from_env()
    stop = threading.Event()
    killed: set[str] = set()

    def killer() -> None:
        label = "envfarm.harness.instance=envfarm-tests__calc-loop"
        while not stop.is_set():
            for c in client.containers.list(filters={"label": label}):
                if c.id not in killed:
                    time.sleep(1.0)  # let it reach the tests
                    with contextlib.suppress(docker.errors.APIError):
                        c.kill()
                    killed.add(c.id)
            time.sleep(0.1)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        result = run(toy, tmp_path, ("loop",), timeout_s=60)
    finally:
        stop.set()
        thread.join()
    report = result.reports["envfarm-tests__calc-loop"]
    assert report.error_kind is ErrorKind.SANDBOX and report.infra_error and report.attempts == 2, report
    assert len(killed) >= 2


def test_a_failing_image_build_is_an_infra_error_retried_once(
    toy: tuple[Path, str, Path], tmp_path: Path
) -> None:
    source, _, specs = toy
    broken = tmp_path / "specs"
    broken.mkdir()
    text = (specs / f"{KEY}.toml").read_text()
    (broken / f"{KEY}.toml").write_text(text + 'install = ["echo install-broke >&2; false"]\n')
    events: list[Event] = []
    result = run((source, toy[1], broken), tmp_path, ("gold",), events)
    report = result.reports["envfarm-tests__calc-gold"]
    assert report.error_kind is ErrorKind.BUILD and report.infra_error and report.attempts == 2
    assert [e.phase for e in events].count("retry") == 1 and "install-broke" in (report.error or "")
    assert str(broken / f"{KEY}.toml") in (report.error or ""), "the message names the spec to fix"
    assert "\x1b[" not in (report.error or "")
    assert result.summary.infra_failure_ids == result.summary.error_ids == ["envfarm-tests__calc-gold"]


@pytest.mark.parametrize(
    ("policy", "canaries", "differential", "resolved", "rules"),
    [
        (Policy.OFF, False, False, True, []),
        (Policy.OFF, True, False, False, ["canary"]),
        (Policy.OFF, False, True, False, ["differential"]),
        (Policy.FLAG, False, False, False, ["conftest"]),
    ],
)
def test_tamper_policies_and_canaries(
    toy: tuple[Path, str, Path],
    tmp_path: Path,
    policy: Policy,
    canaries: bool,
    differential: bool,
    resolved: bool,
    rules: list[str],
) -> None:
    """``off`` without canaries and twins is SWE-bench's behaviour: the flipping conftest.py resolves the
    instance (upstream swebench issue 631). With canaries on, or the differential check, no path rule is
    needed: the must-fail canaries, or the perturbed twins of FAIL_TO_PASS tests, come out passed."""
    report = run(toy, tmp_path, ("conftest",), tamper=policy, canaries=canaries,
                 differential=differential).reports[
        "envfarm-tests__calc-conftest"
    ]
    assert report.resolved is resolved
    assert sorted({f.rule for f in report.findings}) == rules
    assert all(f.action == "flagged" for f in report.findings)


def test_planting_runs_off_the_event_loops_thread(
    toy: tuple[Path, str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parsing and rewriting a long test module takes seconds; done on the loop's thread it would stall
    every other instance in flight, so canaries and twins are planted in worker threads."""
    from envfarm.harness import canary as canary_mod
    from envfarm.harness import differential as differential_mod

    seen: dict[str, bool] = {}

    def spy(name: str, real: Callable[..., object]) -> Callable[..., object]:
        def call(*args: object, **kwargs: object) -> object:
            seen[name] = seen.get(name, True) and threading.current_thread() is not threading.main_thread()
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(canary_mod, "plant", spy("canaries", canary_mod.plant))
    monkeypatch.setattr(differential_mod, "plant", spy("twins", differential_mod.plant))
    report = run(toy, tmp_path, ("gold",)).reports["envfarm-tests__calc-gold"]
    assert report.resolved
    assert seen == {"canaries": True, "twins": True}


def test_unsafe_patch_is_refused_without_running(toy: tuple[Path, str, Path], tmp_path: Path) -> None:
    source, base, specs = toy
    inst = instances(base, ("bad",))
    evil = (
        "diff --git a/.git/config b/.git/config\n--- a/.git/config\n+++ b/.git/config\n@@ -1 +1 @@\n-a\n+b\n"
    )
    config = HarnessConfig(run_id="u", report_dir=tmp_path, repo_source=source, specs=(specs,))
    preds = {inst[0].instance_id: Prediction(inst[0].instance_id, "m", evil)}
    report = asyncio.run(evaluate(inst, preds, config)).reports[inst[0].instance_id]
    assert report.error_kind is ErrorKind.UNSAFE_PATCH and report.findings[0].action == "refused"


async def test_instance_image_holds_one_commit_and_an_editable_install(toy: tuple[Path, str, Path]) -> None:
    source, base, specs = toy
    plan = SpecCatalog([specs]).plan(instances(base, ("gold",))[0])
    image = await ImageBuilder(source).instance(plan)
    backend = get_backend("docker")
    try:
        async with backend.open(image=image.tag, limits=Limits(memory_mb=512, disk_mb=128)) as sb:
            res = await sb.exec(
                f"git -C {PRISTINE} rev-list --all | wc -l; ls {PRISTINE}; readlink /testbed; "
                f"cp -a {PRISTINE} /workspace/testbed && cd /tmp && "
                "python -c 'import calc; print(calc.__file__)'; "
                f"touch {PRISTINE}/x 2>&1 | grep -c 'Read-only'"
            )
    finally:
        await backend.aclose()
    lines = res.stdout.split()
    assert lines[0] == "1" and "FUTURE.md" not in lines and "calc" in lines
    assert "/workspace/testbed" in lines and "/workspace/testbed/calc/__init__.py" in lines
    assert lines[-1] == "1", "the image's copy is read-only; runs work on the /workspace copy"
