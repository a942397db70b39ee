"""Finding runs in the folders given with ``--run``: farm runs, trainer runs and harness reports.

    farm run      a folder with run.json (``envfarm farm run`` / ``eval``; see envfarm/rollout/runs.py)
    trainer run   a folder with metrics.jsonl (the trainer's output folder)
    harness run   <report-dir>/<run-id>/<model>/<instance>/report.json (+ <report-dir>/<model>.<run-id>.json);
                  either the report dir or one <run-id> folder may be given

A folder that is none of these is searched one level down (the farm's ``runs/`` folder lists every run in
it); a trainer folder's farm runs (``DIR/runs/<phase>``: demos, evaluations, RL rollouts) are listed too.
Discovery reads directory listings and at most a few small files; it is safe to repeat every request.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from envfarm.errors import ConfigError

Kind = Literal["farm", "trainer", "harness"]
RUN_JSON = "run.json"
METRICS = "metrics.jsonl"
REPORT = "report.json"
MAX_CHILDREN = 2000


@dataclass(frozen=True)
class Source:
    """One run the dashboard shows."""

    kind: Kind
    path: Path
    """Farm and trainer: the run folder. Harness: the report dir."""
    run_id: str = ""
    """Harness: the run id (the folder under the report dir)."""
    model: str = ""
    """Harness: the model folder name (``model_name_or_path`` with ``/`` as ``__``)."""
    label: str = ""
    """What the page calls it, when not the folder name (a trainer's farm run: ``<trainer> · rl``)."""

    @property
    def id(self) -> str:
        key = f"{self.kind}\0{self.path}\0{self.run_id}\0{self.model}"
        return hashlib.sha1(key.encode()).hexdigest()[:10]

    @property
    def name(self) -> str:
        if self.kind == "harness":
            return f"{self.run_id} · {self.model}"
        return self.label or self.path.name

    @property
    def root(self) -> Path:
        """Harness: the folder holding the instance folders; else ``path``."""
        return self.path / self.run_id / self.model if self.kind == "harness" else self.path


def discover(paths: Sequence[Path]) -> list[Source]:
    """Every run under ``paths`` (see the module docstring); ConfigError naming a path that holds none."""
    if not paths:
        raise ConfigError("no run folder given; pass --run DIR (a farm run, a trainer run, a harness "
                          "--report-dir, or a folder holding them, such as runs/)")
    found: dict[str, Source] = {}
    for given in paths:
        path = Path(given).expanduser().resolve()
        if not path.is_dir():
            raise ConfigError(f"{given} is not a folder; pass a run folder printed by `envfarm farm run`, a "
                              "trainer output folder or a harness --report-dir")
        mine = find_runs(path)
        if not mine:
            raise ConfigError(f"{given} holds no envfarm run: no {RUN_JSON} (farm run), {METRICS} (trainer "
                              f"run) or <run-id>/<model>/<instance>/{REPORT} (harness report dir), there or "
                              "one level down; pass the folder `envfarm farm run` printed (`run folder: "
                              "...`), the trainer's output folder, or `envfarm harness run --report-dir`")
        for src in mine:
            found.setdefault(src.id, src)
    return list(found.values())


def find_runs(path: Path) -> list[Source]:
    """The runs in ``path`` itself, else in its sub-folders (one level). Blocking; never raises OSError."""
    own = _runs_here(path, deep=True)
    if own and own[0].kind == "farm":
        return own
    for child in _subdirs(path):
        own += _runs_here(child, deep=False)
    for trainer in [s.path for s in own if s.kind == "trainer"]:  # its farm runs: DIR/runs/<phase>
        own += [Source("farm", c, label=f"{trainer.name} · {c.name}") for c in _subdirs(trainer / "runs")
                if (c / RUN_JSON).is_file()]
    return _unique(own)


def _runs_here(path: Path, deep: bool) -> list[Source]:
    out: list[Source] = []
    if (path / RUN_JSON).is_file():
        return [Source("farm", path)]
    if (path / METRICS).is_file():
        out.append(Source("trainer", path))
    out += _harness_runs(path)
    if deep or not out:  # a <run-id> folder given directly: its report dir is the parent
        out += [Source("harness", path.parent, path.name, m) for m in _model_dirs(path)]
    return out


def _harness_runs(report_dir: Path) -> list[Source]:
    """The (run id, model) pairs of a harness report dir: from its run folders and its summary files."""
    pairs: set[tuple[str, str]] = set()
    for run in _subdirs(report_dir):
        pairs.update((run.name, m) for m in _model_dirs(run))
    for file in _files(report_dir, ".json"):
        summary = _summary_pair(file)
        if summary is not None:
            pairs.add(summary)
    return [Source("harness", report_dir, run, model) for run, model in sorted(pairs)]


def _model_dirs(run: Path) -> list[str]:
    """Model folders of one harness run folder: those holding an instance folder with a report or log."""
    names = []
    for model in _subdirs(run):
        if any((inst / REPORT).is_file() or (inst / "run_instance.log").is_file()
               for inst in _subdirs(model)):
            names.append(model.name)
    return names


def _summary_pair(file: Path) -> tuple[str, str] | None:
    """(run id, model folder) of a harness run summary ``<model>.<run-id>.json``, else None."""
    try:
        if file.stat().st_size > 16 << 20:
            return None
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or "schema_version" not in data or "resolved_ids" not in data:
        return None
    run_id = str(data.get("run_id") or "")
    model = str(data.get("model_name_or_path") or "").replace("/", "__") or "model"
    return (run_id, model) if run_id and file.name == f"{model}.{run_id}.json" else None


def _subdirs(path: Path) -> list[Path]:
    try:
        entries = sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return []
    return entries[:MAX_CHILDREN]


def _files(path: Path, suffix: str) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if p.suffix == suffix and p.is_file())
    except OSError:
        return []


def _unique(sources: Iterable[Source]) -> list[Source]:
    seen: dict[str, Source] = {}
    for s in sources:
        seen.setdefault(s.id, s)
    return list(seen.values())


__all__ = ["Kind", "Source", "discover", "find_runs"]
