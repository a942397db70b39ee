"""SWE-bench instances and predictions: loading, validation and selection.

    load_instances("swe-bench-lite/test.parquet")        # .json .jsonl .parquet .arrow, or a datasets folder
    load_instances("data/", split="test", ids=["pallets__flask-4045"])
    load_predictions("preds.jsonl", instances)              # instance_id, model_name_or_path, model_patch
    load_predictions("gold", instances)                     # each row's own `patch`

Rows may be classic (12 fields: repo, instance_id, base_commit, patch, test_patch, problem_statement,
hints_text, created_at, version, FAIL_TO_PASS, PASS_TO_PASS, environment_setup_commit) or v5 (the same plus
image, eval_script, log_parser, eval_type). FAIL_TO_PASS/PASS_TO_PASS may be JSON-encoded strings or lists.
A local Hugging Face ``datasets`` folder (``save_to_disk`` output, or a hub snapshot with ``data/*.parquet``)
is read with pyarrow; the ``datasets`` package is not needed.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envfarm.errors import DatasetError

GOLD = "gold"
REQUIRED = ("instance_id", "repo", "base_commit", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS")
_TABLE_SUFFIXES = (".parquet", ".arrow", ".jsonl", ".json")


@dataclass(frozen=True)
class Instance:
    """One SWE-bench task instance (a classic or a v5 row)."""

    instance_id: str
    repo: str
    """``owner/name`` on GitHub, e.g. ``pallets/flask``."""
    base_commit: str
    patch: str
    """The reference (gold) fix."""
    test_patch: str
    """The tests that judge a fix; applied after the model patch."""
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    version: str = ""
    environment_setup_commit: str = ""
    problem_statement: str = ""
    hints_text: str = ""
    created_at: str = ""
    image: str = ""
    """v5: the upstream prebuilt image name (unused here: envfarm builds its own images)."""
    eval_script: str = ""
    """v5: upstream's evaluation script; the test command is read from between its markers."""
    log_parser: str = ""
    """v5: a key of swebench's ``PARSER_REGISTRY``, e.g. ``parse_log_pytest``."""
    eval_type: str = ""
    """v5: ``pass_and_fail`` or ``fail_only``."""
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """Columns not listed above, kept as they were."""

    @property
    def repo_key(self) -> str:
        """SWE-bench's instance prefix for the repo: ``pallets/flask`` -> ``pallets__flask``."""
        return self.repo.replace("/", "__")

    def to_row(self) -> dict[str, Any]:
        """The instance as a SWE-bench row (FAIL_TO_PASS/PASS_TO_PASS as JSON strings, like the datasets)."""
        row = {
            "repo": self.repo,
            "instance_id": self.instance_id,
            "base_commit": self.base_commit,
            "patch": self.patch,
            "test_patch": self.test_patch,
            "problem_statement": self.problem_statement,
            "hints_text": self.hints_text,
            "created_at": self.created_at,
            "version": self.version,
            "FAIL_TO_PASS": json.dumps(list(self.fail_to_pass)),
            "PASS_TO_PASS": json.dumps(list(self.pass_to_pass)),
            "environment_setup_commit": self.environment_setup_commit,
        }
        for key in ("image", "eval_script", "log_parser", "eval_type"):
            if value := getattr(self, key):
                row[key] = value
        return {**row, **self.extra}


@dataclass(frozen=True)
class Prediction:
    """One model's answer for one instance."""

    instance_id: str
    model_name_or_path: str
    model_patch: str | None
    """A unified diff; None or blank means the model produced nothing (counted as an empty patch)."""

    @property
    def is_empty(self) -> bool:
        return self.model_patch is None or not self.model_patch.strip()


# ---------------------------------------------------------------------------------------------- instances


def load_instances(path: str | Path, ids: Sequence[str] | None = None, split: str = "test") -> list[Instance]:
    """Read instances from a file or a local datasets folder; keep only ``ids`` (in file order) when given."""
    rows = read_rows(Path(path), split)
    instances = [instance_from_row(row, f"{path} row {i}") for i, row in enumerate(rows)]
    seen: set[str] = set()
    for inst in instances:
        if inst.instance_id in seen:
            raise DatasetError(
                f"{path}: instance_id {inst.instance_id!r} appears twice; deduplicate the file"
            )
        seen.add(inst.instance_id)
    return select(instances, ids, str(path)) if ids else instances


def select(
    instances: Sequence[Instance], ids: Iterable[str], source: str = "the instances"
) -> list[Instance]:
    """The instances named by ``ids`` (file order); an unknown id raises DatasetError with a did-you-mean."""
    wanted = list(dict.fromkeys(ids))
    known = {i.instance_id for i in instances}
    for iid in wanted:
        if iid not in known:
            hint = difflib.get_close_matches(iid, sorted(known), n=1)
            did = f"; did you mean {hint[0]!r}?" if hint else ""
            raise DatasetError(f"instance {iid!r} is not in {source} ({len(known)} instances){did}")
    chosen = set(wanted)
    return [i for i in instances if i.instance_id in chosen]


def instance_from_row(row: Mapping[str, Any], where: str = "row") -> Instance:
    """Validate one row (classic or v5) and turn it into an :class:`Instance`."""
    missing = [k for k in REQUIRED if row.get(k) in (None, "") and k not in ("FAIL_TO_PASS", "PASS_TO_PASS")]
    missing += [k for k in ("FAIL_TO_PASS", "PASS_TO_PASS") if k not in row]
    if missing:
        name = row.get("instance_id", "?")
        raise DatasetError(f"{where} ({name}) lacks {', '.join(missing)}: not a SWE-bench row")
    known = {
        "instance_id",
        "repo",
        "base_commit",
        "patch",
        "test_patch",
        "FAIL_TO_PASS",
        "PASS_TO_PASS",
        "version",
        "environment_setup_commit",
        "problem_statement",
        "hints_text",
        "created_at",
        "image",
        "eval_script",
        "log_parser",
        "eval_type",
    }
    iid = str(row["instance_id"])
    return Instance(
        instance_id=iid,
        repo=str(row["repo"]),
        base_commit=str(row["base_commit"]),
        patch=str(row.get("patch") or ""),
        test_patch=str(row["test_patch"]),
        fail_to_pass=_test_list(row["FAIL_TO_PASS"], iid, "FAIL_TO_PASS"),
        pass_to_pass=_test_list(row["PASS_TO_PASS"], iid, "PASS_TO_PASS"),
        **{k: _text(row.get(k)) for k in known - set(REQUIRED) - {"patch"}},
        extra={k: v for k, v in row.items() if k not in known},
    )


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _test_list(value: Any, iid: str, key: str) -> tuple[str, ...]:
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except json.JSONDecodeError as e:
            raise DatasetError(f"{iid}: {key} is not a JSON list ({e})") from e
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) and hasattr(value, "tolist"):
        value = value.tolist()
    if not isinstance(value, (list, tuple)) or not all(isinstance(t, str) for t in value):
        raise DatasetError(f"{iid}: {key} must be a list of test names, got {type(value).__name__}")
    return tuple(value)


# ------------------------------------------------------------------------------------------ predictions


def load_predictions(source: str | Path, instances: Sequence[Instance]) -> dict[str, Prediction]:
    """Predictions keyed by instance id, for ``instances`` only; ``"gold"`` uses each instance's ``patch``.

    A file may be a JSON list, a JSON object keyed by instance id (as swebench accepts), one bare
    prediction object, or JSONL. Predictions for instances not in ``instances`` are dropped (a file none of
    whose rows match raises DatasetError); one run grades one model.
    """
    if str(source) == GOLD:
        return {i.instance_id: Prediction(i.instance_id, GOLD, i.patch) for i in instances}
    path = Path(source)
    if not path.is_file():
        raise DatasetError(
            f"predictions file {path} {'is a folder' if path.is_dir() else 'does not exist'}; "
            "pass a JSON or JSONL file of {instance_id, model_name_or_path, model_patch}, or `gold`"
        )
    rows = _read_json_rows(path)
    if isinstance(rows, dict):
        if "instance_id" in rows:  # one prediction as a bare object
            rows = [rows]
        else:
            rows = [{"instance_id": k, **v} if isinstance(v, dict) else v for k, v in rows.items()]
    wanted = {i.instance_id for i in instances}
    preds: dict[str, Prediction] = {}
    for n, row in enumerate(rows):
        if not isinstance(row, dict) or "instance_id" not in row:
            raise DatasetError(
                f"{path} row {n}: a prediction needs instance_id, model_name_or_path, model_patch"
            )
        if row["instance_id"] not in wanted:
            continue
        patch = row.get("model_patch")
        preds[row["instance_id"]] = Prediction(
            str(row["instance_id"]),
            str(row.get("model_name_or_path") or path.stem),
            None if patch is None else str(patch),
        )
    if rows and not preds and instances:
        ids = [str(r["instance_id"]) for r in rows]
        hint = difflib.get_close_matches(ids[0], sorted(wanted), n=1)
        did = f"; did you mean {hint[0]!r}?" if hint else ""
        raise DatasetError(
            f"none of the {len(rows)} predictions in {path} is for the {len(wanted)} selected instances "
            f"(first: {ids[0]!r}{did}); check --instances/--instance-ids against the predictions file"
        )
    models = {p.model_name_or_path for p in preds.values()}
    if len(models) > 1:
        raise DatasetError(f"{path} mixes models {sorted(models)}; grade one model_name_or_path per run")
    return preds


# ------------------------------------------------------------------------------------------------ files


def read_rows(path: Path, split: str = "test") -> list[dict[str, Any]]:
    """Rows of a .json/.jsonl/.parquet/.arrow file, or of the ``split`` in a local datasets folder."""
    if not path.exists():
        raise DatasetError(
            f"instances file {path} does not exist; pass a .json/.jsonl/.parquet/.arrow file of SWE-bench "
            "rows or a local datasets folder"
        )
    if path.is_dir():
        files = _dataset_files(path, split)
        return [row for f in files for row in read_rows(f, split)]
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return _pyarrow_rows(path, "parquet")
    if suffix == ".arrow":
        return _pyarrow_rows(path, "arrow")
    rows = _read_json_rows(path)
    if isinstance(rows, dict):
        rows = list(rows.values()) if all(isinstance(v, dict) for v in rows.values()) else [rows]
    return rows


def _read_json_rows(path: Path) -> list[Any] | dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise DatasetError(f"cannot read {path}: {e}") from e
    except UnicodeDecodeError as e:
        raise DatasetError(f"{path} is not UTF-8 text ({e}); pass a JSON, JSONL or parquet file") from e
    if path.suffix.lower() != ".jsonl":
        try:
            data = json.loads(text)
            if isinstance(data, (list, dict)):
                return data
        except json.JSONDecodeError:
            pass  # maybe JSON lines in a .json file
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise DatasetError(
                    f"{path}:{n} is neither JSON nor JSON lines ({e}); write a JSON list or object, "
                    "or one JSON object per line"
                ) from e
    return rows


def _pyarrow_rows(path: Path, kind: str) -> list[dict[str, Any]]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as e:
        raise DatasetError(f"reading {path} needs pyarrow: `pip install pyarrow` ({e})") from e
    try:
        if kind == "parquet":
            table = pq.read_table(path)
        else:
            with pa.memory_map(str(path)) as source:
                try:
                    table = pa.ipc.open_stream(source).read_all()
                except pa.ArrowInvalid:
                    table = pa.ipc.open_file(source).read_all()
    except (OSError, pa.ArrowException) as e:
        raise DatasetError(f"cannot read {path} as {kind}: {e}") from e
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


def _dataset_files(folder: Path, split: str) -> list[Path]:
    """The data files of ``split`` in a ``save_to_disk`` folder (DatasetDict or Dataset) or a hub snapshot."""
    if (folder / "dataset_dict.json").is_file() or (folder / split / "state.json").is_file():
        if not (folder / split).is_dir():
            splits = sorted(p.name for p in folder.iterdir() if p.is_dir())
            raise DatasetError(f"{folder} has no split {split!r}; it has {', '.join(splits)} (use --split)")
        folder = folder / split
    if (folder / "state.json").is_file():
        state = json.loads((folder / "state.json").read_text())
        return [folder / f["filename"] for f in state.get("_data_files", [])]
    files = sorted(p for p in folder.rglob("*") if p.suffix.lower() in _TABLE_SUFFIXES and p.is_file())
    files = [p for p in files if p.name not in ("dataset_info.json", "state.json", "dataset_dict.json")]
    in_split = [p for p in files if p.name.startswith(split) or split in p.relative_to(folder).parts[:-1]]
    chosen = in_split or files
    if not chosen:
        raise DatasetError(f"{folder} holds no .parquet/.arrow/.jsonl/.json data files")
    return chosen
