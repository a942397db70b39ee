"""``envfarm harness run|plan`` and ``envfarm images list --harness`` through typer (commands/harness.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envfarm.cli import app as root
from envfarm.commands.harness import app
from envfarm.errors import DatasetError
from envfarm.testing.toyrepo import PATCHES, row, write_spec


def test_plan_lists_ready_rows_and_the_specs_to_write(tmp_path: Path, lite_parquet: Path) -> None:
    ids = ["pallets__flask-4045", "django__django-10914"]
    result = CliRunner().invoke(app, ["plan", "--instances", str(lite_parquet), "--instance-ids", *ids])
    assert result.exit_code == 0, result.output
    assert "2 ready, 0 need a spec" in result.output
    unknown = {**row("o__unknown-1", "a" * 40), "repo": "o/unknown"}
    (tmp_path / "rows.jsonl").write_text(json.dumps(unknown) + "\n")
    result = CliRunner().invoke(app, ["plan", "--instances", str(tmp_path / "rows.jsonl")])
    assert result.exit_code == 0, result.output
    assert "0 ready, 1 need a spec" in result.output and "o__unknown.toml" in result.output.replace("\n", "")


def test_plan_of_every_lite_row_has_a_per_repo_table(lite_parquet: Path) -> None:
    result = CliRunner().invoke(app, ["plan", "--instances", str(lite_parquet)])
    assert result.exit_code == 0, result.output
    counts = re.search(r"(\d+) ready, (\d+) need a spec", result.output)
    assert counts is not None, result.output
    ready, unplanned = map(int, counts.groups())
    assert ready + unplanned == 300 and ready >= 290, "every row plans, or says why not"
    table = result.output[result.output.index("environments per repo/version") :]
    header = next(line for line in table.splitlines() if "repo" in line and "suite" in line)
    assert [c.strip() for c in header.strip("┃ ").split("┃")] == "repo version rows python suite spec".split()
    cells = [line.strip("│ ").split("│") for line in table.splitlines() if "│" in line]
    lines = {tuple(c.strip() for c in cell) for cell in cells}
    assert ("django/django", "3.1", "21", "3.6->3.9*", "bullseye", "derived") in lines
    assert ("django/django", "5.0", "9", "3.11", "bookworm", "derived") in lines
    assert any(line[:2] == ("pallets/flask", "2.3") and line[4] == "bookworm" for line in lines)
    rows = sum(int(line[2]) for line in lines if len(line) == 6 and line[2].isdigit())
    assert rows == ready


def test_unknown_instance_id_is_an_error_with_a_hint(lite_parquet: Path) -> None:
    args = ["run", "--instances", str(lite_parquet), "--instance-ids", "pallets__flask-40"]
    result = CliRunner().invoke(app, [*args, "--predictions", "gold", "--run-id", "x"])
    assert isinstance(result.exception, DatasetError) and "pallets__flask-4045" in str(result.exception)


def _bad_input(tmp: Path, case: str) -> list[str]:
    """The `envfarm harness run` arguments of one kind of bad input (toy rows; nothing needs docker)."""
    good = {"instance_id": "envfarm-tests__calc-1", "model_name_or_path": "m", "model_patch": PATCHES["gold"]}
    unknown = {**row("o__unknown-1", "a" * 40), "repo": "o/unknown"}
    (tmp / "rows.jsonl").write_text(
        json.dumps(row("envfarm-tests__calc-1", "a" * 40)) + "\n" + json.dumps(unknown)
    )
    files = {
        "preds.json": json.dumps([good, {**good, "instance_id": "o__unknown-1"}]),
        "torn.json": json.dumps([good])[:-9],
        "other.json": json.dumps([{**good, "instance_id": "x-1"}]),
    }
    for name, text in files.items():
        (tmp / name).write_text(text)
    (tmp / "blob.json").write_bytes(b"\x89PNG\r\n\x1a\n\xd0\xff")
    (tmp / "file").write_text("")
    specs = write_spec(tmp / "specs").parent
    ids = ["--instance-ids", "envfarm-tests__calc-1"]
    preds = str(tmp / "preds.json")
    args = {
        "missing instances": ["--instances", str(tmp / "nope.jsonl"), "--predictions", "gold"],
        "missing predictions": [*ids, "--predictions", str(tmp / "nope.jsonl")],
        "malformed predictions": [*ids, "--predictions", str(tmp / "torn.json")],
        "binary predictions": [*ids, "--predictions", str(tmp / "blob.json")],
        "predictions of other instances": [*ids, "--predictions", str(tmp / "other.json")],
        "unknown instance id": ["--instance-ids", "envfarm-tests__calc-11", "--predictions", preds],
        "unknown repo without a spec": ["--predictions", preds, "--specs", str(specs)],
        "bad run id": [*ids, "--predictions", preds, "--run-id", "a/b"],
        "repo source not a folder": [*ids, "--predictions", preds, "--repo-source", str(tmp / "file")],
        "repo source not a git URL": [*ids, "--predictions", preds, "--repo-source", "ftp://127.0.0.1/"],
        "unknown image source": [*ids, "--predictions", preds, "--image-source", "download"],
        "registry without pulls": [*ids, "--predictions", preds, "--registry", "127.0.0.1:5000"],
        "bad registry": [*ids, "--predictions", preds, "--image-source", "pull", "--registry", "a b"],
        "unwritable report dir": [
            *ids,
            "--predictions",
            preds,
            "--specs",
            str(specs),
            "--report-dir",
            str(tmp / "file" / "r"),
        ],
    }[case]
    if "--instances" not in args:
        args = ["--instances", str(tmp / "rows.jsonl"), *args]
    if "--report-dir" not in args:
        args += ["--report-dir", str(tmp / "out")]
    return ["harness", "run", "--run-id", "r", *args]


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing instances", "does not exist; pass a .json/.jsonl/.parquet/.arrow file"),
        ("missing predictions", "does not exist; pass a JSON or JSONL file"),
        ("malformed predictions", "is neither JSON nor JSON lines"),
        ("binary predictions", "is not UTF-8 text"),
        ("predictions of other instances", "none of the 1 predictions"),
        ("unknown instance id", "did you mean 'envfarm-tests__calc-1'"),
        ("unknown repo without a spec", "write "),
        ("bad run id", "--run-id: run id 'a/b' must be letters"),
        ("repo source not a folder", "is not a folder; pass the folder holding"),
        ("repo source not a git URL", "--repo-source ftp://127.0.0.1/: git cannot fetch from ftp:// URLs"),
        ("unknown image source", "--image-source: Input should be 'build', 'pull' or 'auto'"),
        ("registry without pulls", "--registry: registry 127.0.0.1:5000 is only read by --image-source pull"),
        ("bad registry", "--registry: registry 'a b' is not a registry prefix; write host[:port]"),
        ("unwritable report dir", "pass a writable --report-dir"),
    ],
)
def test_bad_input_is_one_error_line_with_a_fix_and_exit_2(tmp_path: Path, case: str, message: str) -> None:
    result = CliRunner().invoke(root, _bad_input(tmp_path, case))
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.output
    assert not (tmp_path / "out").exists(), "refused before anything ran"
    if case == "unknown repo without a spec":
        assert "o__unknown.toml" in lines[0] and "1 of 2 instances" in lines[0]


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
    listing = CliRunner().invoke(root, ["images", "list", "--harness", "--json"])
    assert listing.exit_code == 0, listing.output
    payload = json.loads(listing.output)
    tags = {i["tag"].split(":")[0]: i["kind"] for i in payload["images"]}
    assert tags["envfarm/sweb.eval.envfarm-tests__calc-gold"] == "instance"
    assert tags["envfarm/sweb.env.envfarm-tests__calc.0.1"] == "env"
    toy = [e for e in payload["environments"] if e["repo"] == "envfarm-tests/calc" and e["version"] == "0.1"]
    assert tags["envfarm/sweb.eval.envfarm-tests__calc-half"] == "instance"
    # gold and half built their images here (an empty patch builds none); other tests may have added more
    assert len(toy) == 1 and toy[0]["env_images"] >= 1 and toy[0]["instance_images"] >= 2, toy
    assert toy[0]["total_bytes"] == toy[0]["env_bytes"] + toy[0]["instance_bytes"] > 0
    table = CliRunner().invoke(root, ["images", "list", "--harness"], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "disk per repo/version" in table.output
    assert any("envfarm-tests/calc" in line and "0.1" in line for line in table.output.splitlines())
