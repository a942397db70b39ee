"""``envfarm images build --harness`` (harness/env_builds.py): one env image per repo/version, failures and
rows without a spec reported, the rest built; a second run finds every image by its content hash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envfarm.cli import app
from envfarm.harness import SpecCatalog, load_instances
from envfarm.harness.env_builds import plan_envs
from envfarm.sandbox import dockerutil
from envfarm.testing.toyrepo import REPO, row, write_spec

BROKEN = "envfarm-tests/broken"


def _rows(tmp: Path) -> Path:
    """Two toy rows (one env), a row of a repo whose spec cannot build, and one of a repo without a spec."""
    rows = [row("envfarm-tests__calc-1", "a" * 40), row("envfarm-tests__calc-2", "b" * 40)]
    rows += [{**row("envfarm-tests__broken-1", "c" * 40), "repo": BROKEN}]
    rows += [{**row("o__unknown-1", "d" * 40), "repo": "o/unknown"}]
    path = tmp / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    specs = write_spec(tmp / "specs").parent
    (specs / "envfarm-tests__broken.toml").write_text(
        f'repo = "{BROKEN}"\n\n[defaults]\npackages = ["calc-broken ==="]\ntest_cmd = "pytest -rA"\n'
    )
    return path


def test_plan_envs_groups_rows_by_repo_version(tmp_path: Path) -> None:
    rows = load_instances(_rows(tmp_path))
    targets, unplanned = plan_envs(rows, SpecCatalog((tmp_path / "specs",)))
    assert [(t.env.repo, t.instance_ids) for t in targets] == [
        (BROKEN, ("envfarm-tests__broken-1",)),
        (REPO, ("envfarm-tests__calc-1", "envfarm-tests__calc-2")),
    ]
    assert [(u.repo, u.reason, u.instance_ids) for u in unplanned] == [
        ("o/unknown", "no-spec", ("o__unknown-1",))
    ]


def test_a_python_no_suite_ships_is_reported_not_skipped(lite_parquet: Path) -> None:
    rows = load_instances(lite_parquet, ["astropy__astropy-6938", "astropy__astropy-12907"])
    targets, unplanned = plan_envs(rows, SpecCatalog())
    assert [(t.env.repo, t.env.version) for t in targets] == [("astropy/astropy", "4.3")]
    (missing,) = unplanned
    assert (missing.version, missing.reason, missing.instance_ids) == (
        "1.3",
        "python-unavailable",
        ("astropy__astropy-6938",),
    )
    assert "Python 3.6" in missing.detail


@pytest.mark.docker
def test_build_reports_each_env_once_and_goes_on_after_a_failure(tmp_path: Path) -> None:
    rows = _rows(tmp_path)
    args = ["images", "build", "--harness", "--instances", str(rows), "--specs", str(tmp_path / "specs")]
    result = CliRunner().invoke(app, [*args, "--report", str(tmp_path / "out.json")], env={"COLUMNS": "200"})
    assert result.exit_code == 1, result.output  # the broken spec failed; the toy env still built
    out = json.loads((tmp_path / "out.json").read_text())
    builds = {b["repo"]: b for b in out["builds"]}
    assert builds[REPO]["rows"] == 2 and builds[REPO]["error"] == "" and builds[REPO]["tag"]
    assert dockerutil.get_image(builds[REPO]["tag"]) is not None
    assert "ImageBuildError" in builds[BROKEN]["error"] and builds[BROKEN]["tag"] == ""
    assert [(u["repo"], u["reason"]) for u in out["unplanned"]] == [("o/unknown", "no-spec")]
    assert "2 env images: " in result.output and "1 failed; 1 repo/versions not buildable" in result.output

    again = CliRunner().invoke(app, [*args, "--instance-ids", "envfarm-tests__calc-1", "--report",
                                     str(tmp_path / "again.json")])  # fmt: skip
    assert again.exit_code == 0, again.output
    (found,) = json.loads((tmp_path / "again.json").read_text())["builds"]
    assert found["tag"] == builds[REPO]["tag"] and found["built"] is False
    assert "1 env images: 0 built, 1 cached, 0 failed" in again.output
