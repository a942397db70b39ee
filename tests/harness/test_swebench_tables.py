"""``bench/swebench.py``: the committed record of validated SWE-bench rows (docs/swebench/results.jsonl) and
the tables generated from it."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "swebench"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_swebench", ROOT / "bench" / "swebench.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def test_committed_tables_are_generated_from_the_committed_record(tmp_path: Path) -> None:
    _bench().main(["--docs", str(tmp_path), "--out", str(tmp_path / "s.json")])
    for name in ("lite.md", "verified.md", "validated.md", "results.jsonl"):
        assert (tmp_path / name).read_text() == (DOCS / name).read_text(), f"{name}: rerun bench/swebench.py"


def test_a_newer_validate_json_overrides_the_record_and_adds_rows(tmp_path: Path) -> None:
    history = tmp_path / "results.jsonl"
    old = {"instance_id": "pallets__flask-4045", "repo": "pallets/flask", "version": "2.0", "gold": ["error"],
           "empty": "error", "seconds": 1.0, "image": None, "reason": "timeout", "detail": "slow",
           "validated": False, "flake_rate": 0.0, "run_id": "old"}  # fmt: skip
    history.write_text(json.dumps(old) + "\n")
    new = {
        **old,
        "gold": ["resolved"],
        "empty": "unresolved",
        "reason": None,
        "detail": "",
        "validated": True,
    }
    added = {**new, "instance_id": "pallets__flask-4992"}
    run = tmp_path / "reports" / "r2"
    run.mkdir(parents=True)
    rows = [{k: v for k, v in r.items() if k != "run_id"} for r in (new, added)]
    (run / "validate.json").write_text(json.dumps({"run_id": "r2", "rows": rows}))
    docs = tmp_path / "docs"
    summary = _bench().main(["--history", str(history), "--validate", str(tmp_path / "reports"),
                             "--docs", str(docs)])  # fmt: skip
    merged = [json.loads(line) for line in (docs / "results.jsonl").read_text().splitlines()]
    assert [(r["instance_id"], r["run_id"], r["validated"]) for r in merged] == [
        ("pallets__flask-4045", "r2", True),
        ("pallets__flask-4992", "r2", True),
    ]
    flask = summary["lite"]["per_repo"]["pallets/flask"]  # type: ignore[index]
    assert flask["run"] == 2 and flask["gold_resolved"] == 2 and flask["reasons"] == {}
    assert (
        "| pallets__flask-4045 | lite | resolved | unresolved | 1 | validated | r2 |"
        in (docs / "validated.md").read_text()
    )


def test_the_record_names_the_mirror_folder_by_placeholder(tmp_path: Path) -> None:
    """A row's detail keeps the mirror's name, not the folder it lay in on the machine that ran it."""
    run = tmp_path / "reports" / "r3"
    run.mkdir(parents=True)
    row = {"instance_id": "astropy__astropy-14365", "repo": "astropy/astropy", "version": "5.1",
           "gold": ["error"], "empty": "error", "seconds": 1.0, "image": None, "reason": "no-repository",
           "detail": "repo: /srv/mirrors/astropy__astropy.git has commit 7269fa3 but not all of its files",
           "validated": False, "flake_rate": 0.0}  # fmt: skip
    (run / "validate.json").write_text(json.dumps({"run_id": "r3", "rows": [row]}))
    found = _bench().results([run / "validate.json"])
    assert found["astropy__astropy-14365"]["detail"] == (
        "repo: MIRRORS/astropy__astropy.git has commit 7269fa3 but not all of its files")
