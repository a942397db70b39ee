"""Loading instances (every format, classic and v5 rows) and predictions, and selecting by id."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from envfarm.errors import DatasetError
from envfarm.harness import GOLD, Instance, load_instances, load_predictions, select
from envfarm.harness.instances import instance_from_row
from envfarm.testing.toyrepo import row


def test_all_300_lite_rows_load_as_v5_instances(lite: list[Instance]) -> None:
    assert len(lite) == 300
    assert len({i.instance_id for i in lite}) == 300
    for inst in lite:
        assert inst.eval_script and inst.log_parser and inst.eval_type == "pass_and_fail"
        assert inst.fail_to_pass and isinstance(inst.fail_to_pass, tuple)
        assert inst.repo_key == inst.instance_id.rsplit("-", 1)[0]
    flask = next(i for i in lite if i.instance_id == "pallets__flask-4045")
    assert flask.fail_to_pass == (
        "tests/test_blueprints.py::test_dotted_name_not_allowed",
        "tests/test_blueprints.py::test_route_decorator_custom_endpoint_with_dots",
    )


def test_every_format_gives_the_same_instances(lite: list[Instance], tmp_path: Path) -> None:
    rows = [i.to_row() for i in lite[:7]]
    (tmp_path / "list.json").write_text(json.dumps(rows))
    (tmp_path / "by_id.json").write_text(json.dumps({r["instance_id"]: r for r in rows}))
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = pa.Table.from_pylist(rows)
    pq.write_table(table, tmp_path / "rows.parquet")
    hub = tmp_path / "hub" / "data"  # a hub snapshot: data/<split>-*.parquet
    hub.mkdir(parents=True)
    pq.write_table(table, hub / "test-00000-of-00001.parquet")
    pq.write_table(pa.Table.from_pylist(rows[:1]), hub / "dev-00000-of-00001.parquet")
    disk = tmp_path / "saved" / "test"  # datasets' save_to_disk of a DatasetDict: arrow streams + state.json
    disk.mkdir(parents=True)
    with (
        pa.OSFile(str(disk / "data-00000-of-00001.arrow"), "wb") as sink,
        pa.ipc.new_stream(sink, table.schema) as w,
    ):
        w.write_table(table)
    (disk / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}))
    (tmp_path / "saved" / "dataset_dict.json").write_text(json.dumps({"splits": ["test"]}))
    expected = lite[:7]
    for source in ("list.json", "by_id.json", "rows.jsonl", "rows.parquet", "hub", "saved"):
        assert load_instances(tmp_path / source) == expected, source
    assert len(load_instances(tmp_path / "hub", split="dev")) == 1
    with pytest.raises(DatasetError, match="no split 'validation'"):
        load_instances(tmp_path / "saved", split="validation")


def test_classic_rows_and_selection() -> None:
    classic = instance_from_row(row("envfarm-tests__calc-1", "a" * 40))
    assert classic.eval_script == "" and classic.log_parser == "" and classic.version == "0.1"
    assert classic.pass_to_pass == ("tests/test_ops.py::test_add", "tests/test_ops.py::test_add_negative")
    other = instance_from_row({**row("envfarm-tests__calc-2", "b" * 40), "FAIL_TO_PASS": ["t::x"], "note": 1})
    assert other.fail_to_pass == ("t::x",) and other.extra == {"note": 1}
    assert [i.instance_id for i in select([other, classic], ["envfarm-tests__calc-1"])] == [
        "envfarm-tests__calc-1"
    ]
    with pytest.raises(DatasetError, match="did you mean 'envfarm-tests__calc-1'"):
        select([classic], ["envfarm-tests__calc-11"])
    with pytest.raises(DatasetError, match="lacks base_commit"):
        instance_from_row({k: v for k, v in row("x-1", "c" * 40).items() if k != "base_commit"})
    with pytest.raises(DatasetError, match="not a JSON list"):
        instance_from_row({**row("x-1", "c" * 40), "PASS_TO_PASS": "[oops"})


def test_duplicate_ids_are_refused(tmp_path: Path) -> None:
    r = row("x-1", "c" * 40)
    (tmp_path / "dup.jsonl").write_text(json.dumps(r) + "\n" + json.dumps(r) + "\n")
    with pytest.raises(DatasetError, match="appears twice"):
        load_instances(tmp_path / "dup.jsonl")


def test_predictions_gold_list_dict_jsonl(lite: list[Instance], tmp_path: Path) -> None:
    rows = lite[:3]
    gold = load_predictions(GOLD, rows)
    assert {p.model_patch for p in gold.values()} == {i.patch for i in rows}
    assert {p.model_name_or_path for p in gold.values()} == {"gold"}
    preds = [
        {"instance_id": rows[0].instance_id, "model_name_or_path": "m/x", "model_patch": "diff"},
        {"instance_id": rows[1].instance_id, "model_name_or_path": "m/x", "model_patch": None},
        {"instance_id": "not-in-the-run", "model_name_or_path": "m/x", "model_patch": "diff"},
    ]
    (tmp_path / "p.json").write_text(json.dumps(preds))
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(p) + "\n" for p in preds))
    (tmp_path / "d.json").write_text(json.dumps({p["instance_id"]: p for p in preds}))
    for name in ("p.json", "p.jsonl", "d.json"):
        loaded = load_predictions(tmp_path / name, rows)
        assert set(loaded) == {rows[0].instance_id, rows[1].instance_id}, name
        assert loaded[rows[1].instance_id].is_empty and not loaded[rows[0].instance_id].is_empty
    mixed = [*preds[:1], {**preds[1], "model_name_or_path": "other"}]
    (tmp_path / "mixed.json").write_text(json.dumps(mixed))
    with pytest.raises(DatasetError, match="mixes models"):
        load_predictions(tmp_path / "mixed.json", rows)


def test_predictions_files_that_cannot_be_right_are_clear_errors(tmp_path: Path) -> None:
    rows = [instance_from_row(row("envfarm-tests__calc-1", "a" * 40))]
    one = {"instance_id": "envfarm-tests__calc-1", "model_name_or_path": "m", "model_patch": "diff"}
    (tmp_path / "one.json").write_text(json.dumps(one))
    assert load_predictions(tmp_path / "one.json", rows)["envfarm-tests__calc-1"].model_patch == "diff"
    (tmp_path / "other.jsonl").write_text(json.dumps({**one, "instance_id": "envfarm-tests__calc-11"}) + "\n")
    with pytest.raises(
        DatasetError, match=r"none of the 1 predictions .* did you mean 'envfarm-tests__calc-1'"
    ):
        load_predictions(tmp_path / "other.jsonl", rows)
    (tmp_path / "binary.json").write_bytes(b"\x89PNG\r\n\x1a\n\xd0\xff")
    with pytest.raises(DatasetError, match="is not UTF-8 text"):
        load_predictions(tmp_path / "binary.json", rows)
    with pytest.raises(DatasetError, match=r"does not exist; pass a JSON or JSONL file .* or `gold`"):
        load_predictions(tmp_path / "nope.jsonl", rows)
    with pytest.raises(DatasetError, match="is a folder"):
        load_predictions(tmp_path, rows)
    with pytest.raises(DatasetError, match=r"does not exist; pass a \.json/\.jsonl/\.parquet"):
        load_instances(tmp_path / "nope.parquet")
