"""``harness validate`` on the toy repository (real docker): gold and the unpatched base per row, a reason
from the fixed list for every row that does not validate, validate.json/md, resume, --repeat."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envfarm.cli import app
from envfarm.harness import Event, HarnessConfig, Instance, ResolutionStatus, decoy_pool, grade
from envfarm.harness.instances import instance_from_row
from envfarm.harness.validate import REASONS, Validation, judge, validate
from envfarm.testing.toyrepo import KEY, PATCHES, row

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def rows(base: str) -> list[Instance]:
    good = instance_from_row(row(f"{KEY}-valid", base))
    half = dataclasses.replace(instance_from_row(row(f"{KEY}-halfgold", base)), patch=PATCHES["half"])
    fixed = dataclasses.replace(
        instance_from_row(row(f"{KEY}-prefixed", base)), fail_to_pass=("tests/test_ops.py::test_add",)
    )
    ghost = dataclasses.replace(instance_from_row(row(f"{KEY}-ghost", base)), base_commit="1" * 40)
    return [good, half, fixed, ghost]


@pytest.fixture(scope="module")
def validation(toy: tuple[Path, str, Path], tmp_path_factory: pytest.TempPathFactory) -> Validation:
    source, base, specs = toy
    cfg = HarnessConfig(run_id="v1", report_dir=tmp_path_factory.mktemp("validate"), repo_source=source,
                        specs=(specs,), max_workers=3, timeout_s=60)
    return asyncio.run(validate(rows(base), cfg, repeat=2))


def test_reasons_per_row(validation: Validation) -> None:
    by = {r.instance_id.rsplit("-", 1)[1]: r for r in validation.rows}
    assert by["valid"].validated and by["valid"].gold == ("resolved", "resolved")
    assert by["valid"].empty == "unresolved" and by["valid"].flake_rate == 0.0
    assert by["halfgold"].reason == "upstream-broken" and "test_div" in by["halfgold"].detail
    assert by["prefixed"].reason == "upstream-broken" and "already passes" in by["prefixed"].detail
    assert by["ghost"].reason == "no-repository"
    assert {r.reason for r in validation.rows} <= {None, *REASONS}
    assert validation.validated == [f"{KEY}-valid"]


def test_gold_runs_probe_decoys_and_the_pool_keeps_those_gold_failed(validation: Validation) -> None:
    assert validation.decoys_path is not None  # read before test_files_and_resume rewrites it
    pools = decoy_pool.load(validation.decoys_path)
    assert set(pools) == {f"{KEY}-valid", f"{KEY}-prefixed"}, "rows whose gold resolved (ghost never ran)"
    sites = pools[f"{KEY}-valid"]["tests/test_ops.py"]
    # test_mul: assert mul(3, 4) == 12; test_div: assert div(8, 2) == 4; any other input fails both
    assert {(s.func, s.old) for s in sites} == {("test_mul", "3"), ("test_mul", "4"), ("test_div", "8"),
                                                ("test_div", "2")}
    assert all(s.values and s.old not in s.values and s.row == 1 for s in sites)


def test_files_and_resume(validation: Validation, toy: tuple[Path, str, Path]) -> None:
    data = json.loads(validation.json_path.read_text())
    assert data["per_repo"]["envfarm-tests/calc"]["rows"] == 4
    assert data["per_repo"]["envfarm-tests/calc"]["reasons"] == {"no-repository": 1, "upstream-broken": 2}
    md = validation.markdown_path.read_text()
    assert "| envfarm-tests/calc | 4 | 2 | 1 |" in md and f"| {KEY}-valid | resolved/resolved |" in md
    source, base, specs = toy
    cfg = HarnessConfig(run_id="v1", report_dir=validation.json_path.parents[1], repo_source=source,
                        specs=(specs,), max_workers=3, timeout_s=60)
    events: list[object] = []
    again = asyncio.run(validate(rows(base)[:1], cfg, repeat=2, progress=events.append))
    assert {getattr(e, "phase", None) for e in events} == {"skipped"}, "every part resumes"
    assert again.rows[0].validated


def test_chunks_record_each_row_as_it_finishes(
    validation: Validation, toy: tuple[Path, str, Path], tmp_path: Path
) -> None:
    """chunk=1: validate.json holds every earlier row when a row reports, and each row reports once per
    run (rows of earlier chunks resume silently)."""
    source, base, specs = toy
    shutil.copytree(validation.json_path.parents[1], tmp_path / "r")
    written = tmp_path / "r" / "v1" / "validate.json"
    written.unlink()
    cfg = HarnessConfig(run_id="v1", report_dir=tmp_path / "r", repo_source=source, specs=(specs,),
                        max_workers=3, timeout_s=60)  # fmt: skip
    seen: list[tuple[str, tuple[str, ...]]] = []

    def on_event(event: Event) -> None:
        if event.phase not in ("done", "skipped"):  # the ghost row's error reruns: build, retry, done
            return
        done = json.loads(written.read_text())["rows"] if written.exists() else []
        seen.append((event.instance_id, tuple(r["instance_id"] for r in done)))

    result = asyncio.run(validate(rows(base), cfg, repeat=2, progress=on_event, chunk=1))
    ids = [r.instance_id for r in rows(base)]
    assert [iid for iid, _ in seen] == [iid for iid in ids for _ in range(4)], "gold twice, base, probes"
    assert all(before == tuple(ids[: ids.index(iid)]) for iid, before in seen)
    def verdicts(v: Validation) -> list[tuple[object, ...]]:
        return [(r.instance_id, r.gold, r.empty, r.reason) for r in v.rows]

    assert verdicts(result) == verdicts(validation)


def test_a_baseline_log_is_graded_not_counted_empty(toy_instance: Instance) -> None:
    log = (">>>>> Start Test Output\nPASSED tests/test_ops.py::test_add\nFAILED tests/test_ops.py::test_mul\n"
           ">>>>> End Test Output\n")
    report = grade(toy_instance, log, model_patch=None, baseline=True)
    assert report.outcome.value == "unresolved" and report.status is ResolutionStatus.NO
    assert not report.patch_exists


def test_cli(toy: tuple[Path, str, Path], tmp_path: Path) -> None:
    source, base, specs = toy
    table = tmp_path / "rows.jsonl"
    table.write_text(json.dumps(row(f"{KEY}-cli", base)) + "\n")
    args = ["harness", "validate", "--instances", str(table), "--run-id", "c1", "--report-dir",
            str(tmp_path / "r"), "--repo-source", str(source), "--specs", str(specs)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "validated 1/1" in result.output and (tmp_path / "r" / "c1" / "validate.md").is_file()
    pool = tmp_path / "r" / "c1" / "decoys.json"
    assert str(pool) in result.output.replace("\n", "") and decoy_pool.load(pool)[f"{KEY}-cli"]
    graded = ["harness", "run", "--instances", str(table), "--predictions", "gold", "--report-dir",
              str(tmp_path / "r"), "--repo-source", str(source), "--specs", str(specs)]
    result = CliRunner().invoke(app, [*graded, "--run-id", "g1", "--decoy-pool", str(pool)])
    assert result.exit_code == 0 and "resolved 1" in result.output.replace("\n", " "), result.output
    result = CliRunner().invoke(app, [*graded, "--run-id", "g2", "--decoy-pool", str(tmp_path / "nope.json")])
    assert result.exit_code != 0 and "nope.json" in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(app, [*args[:5], "c2", *args[6:], "--no-probe-decoys"])
    assert result.exit_code == 0 and "validated 1/1" in result.output, result.output
    assert not (tmp_path / "r" / "c2" / "decoys.json").exists() and not (tmp_path / "r" / "c2-probe").exists()


@pytest.mark.parametrize(
    ("evidence", "reason"),
    [
        ("E   ssl.SSLError: [SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1123)", "needs-network"),
        ("E   socket.gaierror: [Errno -3] Temporary failure in name resolution", "needs-network"),
        ("E   AssertionError: assert 3 == 4", "upstream-broken"),
    ],
)
def test_gold_failing_on_network_evidence_is_needs_network(toy_instance: Instance, evidence: str,
                                                          reason: str) -> None:
    log = (">>>>> Start Test Output\nPASSED tests/test_ops.py::test_add\nFAILED tests/test_ops.py::test_mul\n"
           f"{evidence}\n>>>>> End Test Output\n")
    gold = grade(toy_instance, log, model_patch=toy_instance.patch)
    base = grade(toy_instance, log, model_patch=None, baseline=True)
    assert not gold.resolved
    result = judge(toy_instance, [gold], base, log)
    assert result.reason == reason and "test_mul" in result.detail
