"""The resumable work folder of a mining run (``<out>.work/``): sdists, baselines, mutant outcomes.

    work/sdists/                      downloaded sdists (checked by sha256)
    work/<pypi__name>/baseline.json   the tests that passed twice, keyed by what produced them
    work/<pypi__name>/coverage.json   which test files run which source lines (covmap), same key
    work/<pypi__name>/mutants.jsonl   one line per mutant tried (append-only; a rerun skips these)
    work/repos/, work/specs/          the git repositories and environment specs of the rows
    work/harness/                     the harness's validation run (it resumes by run id)

Nothing here is needed to use the output JSONL: its rows rebuild repos and specs (``repo.rebuild``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from envfarm.errors import TaskFactoryError


@dataclass(frozen=True)
class Outcome:
    """What one mutant did to the tests."""

    id: str
    verdict: str
    """``kept``, ``survived`` (no test failed), ``broken`` (every selected test failed), ``timeout``,
    ``crashed`` (it took its sandbox down twice), ``uncovered`` (no passing test runs its lines: not run),
    ``suspect-fix`` (its fix reads as a forgery to the harness's static screen: not run)."""
    fail_to_pass: tuple[str, ...] = ()
    pass_to_pass: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    problem_statement: str = ""
    log: str = ""
    """The raw test log of a kept mutant (its problem statement is written from it)."""
    exit_code: int = 0
    duration_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Outcome:
        fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        return cls(**fields)


class WorkFolder:
    """Paths and cached results under ``<out>.work``."""

    def __init__(self, out: Path) -> None:
        self.root = out.parent / f"{out.name}.work"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise TaskFactoryError(f"cannot create the work folder {self.root} ({e}); pass a writable "
                                   "--out path") from e
        self.sdists = self.root / "sdists"
        self.repos = self.root / "repos"
        self.specs = self.root / "specs"
        self.harness = self.root / "harness"

    def project(self, key: str) -> Path:
        path = self.root / key
        path.mkdir(parents=True, exist_ok=True)
        return path

    def read_stamped(self, key: str, name: str, stamp: str) -> dict[str, Any] | None:
        """The project's JSON file ``name`` (``baseline.json``, ``coverage.json``) when written under
        ``stamp``."""
        path = self.project(key) / name
        if not path.is_file():
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if data.get("stamp") == stamp else None

    def write_stamped(self, key: str, name: str, data: Mapping[str, Any]) -> None:
        write_atomic(self.project(key) / name, json.dumps(data, indent=1, sort_keys=True))

    def read_outcomes(self, key: str, stamp: str) -> dict[str, Outcome]:
        """Finished mutants of a project (only those tried under the same baseline ``stamp``)."""
        path = self.project(key) / "mutants.jsonl"
        out: dict[str, Outcome] = {}
        if not path.is_file():
            return out
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by an interrupted run: that mutant runs again
            if data.pop("stamp", None) == stamp:
                out[data["id"]] = Outcome.from_json(data)
        return out

    def append_outcome(self, key: str, stamp: str, outcome: Outcome) -> None:
        line = json.dumps({"stamp": stamp, **outcome.to_json()}, sort_keys=True) + "\n"
        with open(self.project(key) / "mutants.jsonl", "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_jsonl(path: Path, table: list[dict[str, Any]]) -> None:
    """Write rows as sorted-key JSON lines, atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in table))
