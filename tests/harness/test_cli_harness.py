"""``envfarm harness run|plan|images`` through typer (the sub-app in envfarm/commands/harness.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from toyrepo import LITE, PATCHES, row
from typer.testing import CliRunner

from envfarm.commands.harness import app
from envfarm.errors import DatasetError


def test_plan_lists_ready_rows_and_the_specs_to_write() -> None:
    if not (LITE / "test.parquet").is_file():
        pytest.skip("SWE-bench Lite is not available")
    ids = ["pallets__flask-4045", "django__django-10914"]
    result = CliRunner().invoke(
        app, ["plan", "--instances", str(LITE / "test.parquet"), "--instance-ids", *ids]
    )
    assert result.exit_code == 0, result.output
    assert "1 ready, 1 need a spec" in result.output and "django__django.toml" in result.output.replace(
        "\n", ""
    )


def test_unknown_instance_id_is_an_error_with_a_hint() -> None:
    if not (LITE / "test.parquet").is_file():
        pytest.skip("SWE-bench Lite is not available")
    args = ["run", "--instances", str(LITE / "test.parquet"), "--instance-ids", "pallets__flask-40"]
    result = CliRunner().invoke(app, [*args, "--predictions", "gold", "--run-id", "x"])
    assert isinstance(result.exception, DatasetError) and "pallets__flask-4045" in str(result.exception)


@pytest.mark.docker
def test_run_writes_swebench_reports(toy: tuple[Path, str, Path], tmp_path: Path) -> None:
    source, base, specs = toy
    rows = [row(f"envfarm-tests__calc-{n}", base) for n in ("gold", "half", "empty")]
    (tmp_path / "instances.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    preds = [
        {
            "instance_id": r["instance_id"],
            "model_name_or_path": "org/m",
            "model_patch": PATCHES[str(r["instance_id"]).rsplit("-", 1)[1]],
        }
        for r in rows
    ]
    (tmp_path / "preds.json").write_text(json.dumps(preds))
    args = [
        "run", "--instances", str(tmp_path / "instances.jsonl"),
        "--predictions", str(tmp_path / "preds.json"),
        "--instance-ids", "envfarm-tests__calc-gold", "envfarm-tests__calc-half", "envfarm-tests__calc-empty",
        "--repo-source", str(source), "--specs", str(specs), "--run-id", "cli",
        "--report-dir", str(tmp_path / "out"), "--max-workers", "2", "--timeout", "60",
    ]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "resolved 1/3" in result.output
    summary = json.loads((tmp_path / "out" / "org__m.cli.json").read_text())
    assert summary["resolved_ids"] == ["envfarm-tests__calc-gold"] and summary["schema_version"] == 2
    assert summary["empty_patch_ids"] == ["envfarm-tests__calc-empty"]
    report = json.loads(
        (tmp_path / "out" / "cli" / "org__m" / "envfarm-tests__calc-half" / "report.json").read_text()
    )
    assert report["envfarm-tests__calc-half"]["envfarm"]["resolution_status"] == "RESOLVED_PARTIAL"
    listing = CliRunner().invoke(app, ["images", "list", "--json"])
    assert listing.exit_code == 0, listing.output
    tags = {i["tag"].split(":")[0]: i["kind"] for i in json.loads(listing.output)}
    assert tags["envfarm/sweb.eval.envfarm-tests__calc-gold"] == "instance"
    assert tags["envfarm/sweb.env.envfarm-tests__calc.0.1"] == "env"
