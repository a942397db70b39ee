"""A task catalogue: many projects mined in one resumable run (``envfarm tasks mine --packages-file F``).

    packages = read_packages_file(Path("bench/packages-40.txt"))     # NAME==VERSION lines
    report = asyncio.run(catalogue(MineConfig(packages=packages, out=Path("catalogue/"), jobs=2)))

``config.out`` is a folder: ``<out>/pypi__<name>.jsonl`` per project (its rows, harness-validated, as
``mine`` writes them, with its resumable state in ``<out>/pypi__<name>.jsonl.work/``) and
``<out>/catalogue.json``: per project its status (``done``, ``skipped``: the project cannot be mined, with
the reason; ``failed``: something broke, retried on the next run), tasks, seconds, layout and mutant
figures. Up to ``config.jobs`` projects are mined at once, each with one mutant sandbox. A project that
fails is recorded and the others go on. Resumable: a rerun skips projects recorded ``done`` or ``skipped``
under the same settings, and a project cut off half-way reuses its cached baseline, mutant outcomes and
harness reports.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envfarm.errors import ConfigError, PackageNotFound, TaskFactoryError

from .mine import MineConfig, PackageReport, Progress, ProgressFn, mine
from .recipe import RecipesFile, read_recipes
from .repo import OWNER
from .sdist import parse_spec
from .sources import CATALOGUE
from .state import write_atomic
from .validate import CHECKS

log = logging.getLogger(__name__)

REASONS = (
    ("doctest-only", "doctest-only suite"),
    ("no-tests", "ships no tests"),
    ("no-sdist", "no source distribution"),
    ("no-source", "no Python package found"),
    ("env-build", "test environment did not build"),
    ("no-passing-tests", "no test of the sdist passes"),
    ("baseline-timeout", "baseline test run did not finish"),
    ("baseline-crash", "baseline test run failed"),
    ("download", "pip download"),
)
"""Reason codes of a skipped project, by a phrase of the factory's error message."""


@dataclass(frozen=True)
class ProjectEntry:
    """One project of the catalogue."""

    package: str
    status: str
    """``done`` (mined; ``tasks`` may be 0), ``skipped`` (cannot be mined: ``reason``) or ``failed``."""
    tasks: int = 0
    file: str = ""
    """The project's JSONL, relative to the catalogue folder."""
    time_s: float = 0.0
    reason: str = ""
    """A code from :data:`REASONS`, ``no-tasks`` (mined, nothing validated) or ``error`` (failed)."""
    detail: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)
    """The project's ``PackageReport`` (candidates, tried, kept, validated, layout origin, ...)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CatalogueReport:
    out: Path
    projects: tuple[ProjectEntry, ...]
    wall_s: float

    @property
    def tasks(self) -> int:
        return sum(p.tasks for p in self.projects)


def read_packages_file(path: Path) -> tuple[str, ...]:
    """``NAME==VERSION`` lines of ``path`` (``#`` comments and blank lines ignored), each checked."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise ConfigError(f"cannot read --packages-file {path}: {e}") from e
    out: list[str] = []
    for n, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            out.append(str(parse_spec(text)))
        except ConfigError as e:
            raise ConfigError(f"{path}:{n}: {e}") from None
    if not out:
        raise ConfigError(f"--packages-file {path} names no package; write one NAME==VERSION a line")
    return tuple(out)


def reason_code(error: BaseException) -> str:
    if isinstance(error, PackageNotFound):
        return "no-sdist"
    text = str(error)
    return next((code for code, phrase in REASONS if phrase in text), "error")


def settings_of(config: MineConfig, package: str | None = None,
                recipes: RecipesFile | None = None) -> dict[str, Any]:
    """What makes a recorded project reusable by a rerun (other options only change speed): the options, and
    the ``package``'s own recipe table when it has one (a project skipped before an override was written is
    tried again once it has one). ``recipes``: the recipe file already read (default: read it)."""
    out: dict[str, Any] = {
        "max_tasks": config.max_tasks, "max_mutants": config.max_mutants, "seed": config.seed,
        "mutations": config.mutations, "harness_check": config.harness_check,
        "validation": CHECKS if config.harness_check else None,
    }
    own = (recipes or read_recipes(config.recipes)).own(parse_spec(package).name) if package else None
    if own is not None:
        out["recipe"] = own.model_dump(exclude_none=True)
    return out


class Catalogue:
    """``<out>/catalogue.json``: read at start, rewritten (atomically) after every project."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / CATALOGUE
        self.entries: dict[str, ProjectEntry] = {}
        if self.path.is_file():
            data = json.loads(self.path.read_text(encoding="utf-8"))
            self.entries = {p["package"]: ProjectEntry(**p) for p in data.get("projects", [])}

    def reusable(self, package: str, settings: dict[str, Any],
                 retry_skipped: bool = False) -> ProjectEntry | None:
        entry = self.entries.get(package)
        if entry is None or entry.status == "failed" or entry.settings != settings:
            return None
        if entry.status == "skipped" and retry_skipped:
            return None
        if entry.status == "done" and not (self.folder / entry.file).is_file():
            return None
        return entry

    def record(self, entry: ProjectEntry, order: tuple[str, ...]) -> None:
        self.entries[entry.package] = entry
        projects = [self.entries[p].to_json() for p in order if p in self.entries]
        projects += [e.to_json() for p, e in sorted(self.entries.items()) if p not in order]
        summary = {
            "projects": len(projects),
            "done": sum(p["status"] == "done" for p in projects),
            "with_tasks": sum(p["tasks"] > 0 for p in projects),
            "skipped": {p["package"]: p["reason"] for p in projects if p["status"] == "skipped"},
            "failed": {p["package"]: p["detail"][:200] for p in projects if p["status"] == "failed"},
            "tasks": sum(p["tasks"] for p in projects),
            "time_s": round(sum(p["time_s"] for p in projects), 1),
        }
        write_atomic(self.path, json.dumps({"summary": summary, "projects": projects}, indent=1) + "\n")


async def catalogue(config: MineConfig, progress: ProgressFn | None = None,
                    on_project: Callable[[ProjectEntry], None] | None = None,
                    retry_skipped: bool = False) -> CatalogueReport:
    """Mine every package of ``config`` into the folder ``config.out``; see the module docstring.
    ``retry_skipped``: projects recorded ``skipped`` are tried again (after an envfarm upgrade)."""
    if config.out.suffix == ".jsonl":
        raise ConfigError(f"--out {config.out}: with --packages-file, --out is a folder (one JSONL per "
                          "project plus catalogue.json)")
    book = Catalogue(config.out)
    recipes = read_recipes(config.recipes)  # once: every project's settings include its own table
    order = tuple(config.packages)
    slots = asyncio.Semaphore(config.jobs)
    lock = asyncio.Lock()
    emit = progress or (lambda event: None)
    t0 = time.monotonic()

    async def one(package: str) -> None:
        settings = settings_of(config, package, recipes)
        if (entry := book.reusable(package, settings, retry_skipped)) is not None:
            emit(Progress("cached", package, entry.tasks, entry.tasks, detail=entry.status))
            return
        async with slots:
            entry = await _mine_one(config, package, settings, emit)
        async with lock:
            book.record(entry, order)
        emit(Progress("project", package, entry.tasks, entry.tasks, detail=f"{entry.status} {entry.reason}"))
        if on_project is not None:
            on_project(entry)

    async with asyncio.TaskGroup() as tg:
        for package in order:
            tg.create_task(one(package))
    entries = tuple(book.entries[p] for p in order)
    return CatalogueReport(config.out, entries, time.monotonic() - t0)


async def _mine_one(config: MineConfig, package: str, settings: dict[str, Any],
                    emit: ProgressFn) -> ProjectEntry:
    spec = parse_spec(package)
    file = f"{OWNER}__{spec.name}.jsonl"
    sub = config.model_copy(update={"packages": (package,), "out": config.out / file, "jobs": 1})
    t0 = time.monotonic()
    try:
        report = await mine(sub, progress=emit)
    except TaskFactoryError as e:
        log.info("%s skipped: %s", package, e)
        return ProjectEntry(package, "skipped", time_s=round(time.monotonic() - t0, 1), reason=reason_code(e),
                            detail=str(e)[:2000], settings=settings)
    except Exception as e:  # one project's failure (a bug, a dead daemon) never stops the catalogue
        log.warning("%s failed: %s", package, "".join(traceback.format_exception(e))[-2000:])
        return ProjectEntry(package, "failed", time_s=round(time.monotonic() - t0, 1), reason="error",
                            detail=f"{type(e).__name__}: {e}"[:2000], settings=settings)
    (pkg,) = report.packages
    tasks = report.rows
    return ProjectEntry(package, "done", tasks, file, round(time.monotonic() - t0, 1),
                        "" if tasks else "no-tasks", "", settings, _report_json(pkg))


def _report_json(report: PackageReport) -> dict[str, Any]:
    return asdict(report)
