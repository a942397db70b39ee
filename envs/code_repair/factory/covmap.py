"""Which test files run which source lines: the suite once under coverage, with a context per test.

    cov, why = await measure(project, test_paths, image, backend, env, passing_files, sources, baseline_s)
    cov.select("pkg/mod.py", lines)   # the test files running those lines; (): none; None: choose by name
    cov.timeout_s(files, floor, ceiling)

A mutant then runs only the test files that execute its lines, under a timeout scaled to those files, and a
mutant on lines no passing test executes is not run at all (its verdict is ``uncovered``): on a slow suite
most of the mutant time went to test files that never reach the edit, or to edits no test reaches.

The run uses coverage.py and pytest-cov from the host's environment, uploaded into the sandbox (the image
and the rows do not change): ``--cov-context=test`` labels each line with the node ids that ran it, the
empty label being import and collection time. A line run at import (a ``def``, a default value, a module
constant) may change every test that imports the module: for those the caller falls back to choosing test
files by name (``prepare.test_files_for``). The project's own coverage settings are not read (an empty
config file), and ``--durations=0`` gives each test file's time for the timeout.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import logging
import re
import shutil
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envfarm.errors import tail
from envfarm.harness.images import WORKDIR
from envfarm.pyast import parse
from envfarm.sandbox import Backend

from .repo import Project
from .runner import TestSession

log = logging.getLogger(__name__)

TOOLS = ("coverage", "pytest_cov")
"""Packages uploaded from the host's environment (pure Python but for coverage's optional C tracer)."""
TOOLS_DIR = "/tmp/envfarm-cov"
DATA_FILE = "/tmp/envfarm-cov.data"
EMPTY_CONFIG = "empty.coveragerc"
ARGS = (f"-p pytest_cov.plugin --cov={WORKDIR} --cov-context=test --cov-report= "
        f"--cov-config={TOOLS_DIR}/{EMPTY_CONFIG} --durations=0 --durations-min=0")
IMPORT = -1
"""The test-file index of lines run outside any test (import, collection)."""
TIMEOUT_FACTOR = 4.0
"""The coverage run's timeout (x the baseline suite time), and a mutant's (x its test files' time)."""
MIN_RUN_TIMEOUT_S = 120.0
DURATION = re.compile(r"^(\d+(?:\.\d+)?)s (?:setup|call|teardown) +(\S[^\n]*)$", re.M)
ROOTS = (f"{WORKDIR}/", "/testbed/")


@dataclass(frozen=True)
class CoverageMap:
    """Lines of the project's source files, each with the passing test files that run it."""

    files: tuple[str, ...]
    """The test files (indices of :attr:`lines`)."""
    lines: Mapping[str, Mapping[int, tuple[int, ...]]]
    """Source file -> line -> indices into :attr:`files` (:data:`IMPORT`: run outside any test)."""
    durations: Mapping[str, float]
    """Seconds per test file under coverage (setup, call and teardown of its tests)."""
    overhead_s: float
    """The rest of the run: start-up, imports, collection."""

    def select(self, file: str, lines: Iterable[int]) -> tuple[str, ...] | None:
        """The test files that run any of ``lines`` of ``file``; ``()`` when no passing test runs them;
        None when one runs at import (any test importing the module may notice)."""
        per = self.lines.get(file, {})
        found: set[int] = set()
        for line in lines:
            found.update(per.get(line, ()))
        if IMPORT in found:
            return None
        return tuple(self.files[i] for i in sorted(found))

    def timeout_s(self, files: Sequence[str], floor: float, ceiling: float) -> float:
        """A mutant's timeout on ``files``: TIMEOUT_FACTOR x their time and the start-up, within bounds."""
        took = self.overhead_s + sum(self.durations.get(f, 0.0) for f in files)
        return min(ceiling, max(floor, TIMEOUT_FACTOR * took))

    def to_json(self) -> dict[str, Any]:
        return {"files": list(self.files), "durations": dict(self.durations), "overhead_s": self.overhead_s,
                "lines": {f: {str(n): list(ix) for n, ix in per.items()} for f, per in self.lines.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CoverageMap:
        lines = {f: {int(n): tuple(ix) for n, ix in per.items()} for f, per in data["lines"].items()}
        return cls(tuple(data["files"]), lines, dict(data["durations"]), float(data["overhead_s"]))


def mutation_lines(source: bytes, start: int, end: int, line: int) -> tuple[int, ...]:
    """The lines an edit of ``source[start:end]`` (starting on ``line``) touches, and the first line of the
    innermost statement holding it (a continuation line may record no line event of its own)."""
    last = line + source[start:end].count(b"\n")
    spans = _statements(source)
    holders = [a for a, b in spans if a <= line and b >= last]
    return tuple(sorted({*range(line, last + 1), *holders[-1:]}))


@functools.lru_cache(maxsize=8)
def _statements(source: bytes) -> list[tuple[int, int]]:
    """(first, last) line of every statement, sorted by first line (inner ones after outer ones)."""
    tree = parse(source)
    spans = [(n.lineno, n.end_lineno or n.lineno) for n in ast.walk(tree) if isinstance(n, ast.stmt)]
    return sorted(spans, key=lambda s: (s[0], -s[1]))


def from_data(data_file: Path, log_text: str, took_s: float, source_files: Iterable[str],
              passing_files: Sequence[str]) -> CoverageMap | None:
    """The map from coverage's data file and the run's log; None when no source file was measured (the
    tests ran another copy of the package, say)."""
    import coverage

    data = coverage.CoverageData(basename=str(data_file))
    data.read()
    wanted, index = set(source_files), {f: i for i, f in enumerate(passing_files)}
    sets: dict[str, dict[int, set[int]]] = {}
    for path in sorted(data.measured_files()):
        rel = next((path[len(r):] for r in ROOTS if path.startswith(r)), None)
        if rel not in wanted:
            continue
        per = sets.setdefault(str(rel), {})  # the same file may be measured by two of its paths
        for n, contexts in (data.contexts_by_lineno(path) or {}).items():
            found = [i for i in map(functools.partial(_test_file, index=index), contexts) if i is not None]
            if found:
                per.setdefault(n, set()).update(found)
    if not sets:
        return None
    lines = {f: {n: tuple(sorted(ix)) for n, ix in sorted(per.items())} for f, per in sets.items()}
    durations: dict[str, float] = {}
    for secs, node in DURATION.findall(log_text):
        test_file = node.split("::", 1)[0]
        durations[test_file] = round(durations.get(test_file, 0.0) + float(secs), 3)
    overhead = max(1.0, took_s - sum(durations.values()))
    return CoverageMap(tuple(passing_files), lines, durations, round(overhead, 3))


def _test_file(context: str, index: Mapping[str, int]) -> int | None:
    """The index of the passing test file a context names (``tests/t.py::test_x|run``); IMPORT for the
    empty context or one that names no test; None for a test file with no passing test."""
    if "::" not in context:
        return IMPORT
    return index.get(context.split("::", 1)[0])


def tools_tree(dest: Path) -> bool:
    """Copy coverage and pytest-cov from the host's environment into ``dest``; False when not installed."""
    for name in TOOLS:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            return False
        src = Path(next(iter(spec.submodule_search_locations)))
        shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (dest / EMPTY_CONFIG).write_text("# envfarm: the project's own coverage settings are not read\n")
    return True


async def measure(project: Project, test_paths: Sequence[str], image: str, backend: Backend,
                  env: Mapping[str, str], passing_files: Sequence[str], source_files: Iterable[str],
                  baseline_s: float) -> tuple[CoverageMap | None, str]:
    """Run the suite under coverage in a sandbox: the map, or None and why not (SandboxError when the sandbox
    failed: not the project's doing, so not a verdict to keep)."""
    timeout = max(MIN_RUN_TIMEOUT_S, TIMEOUT_FACTOR * baseline_s)
    run_env = {**env, "PYTHONPATH": ":".join(p for p in (env.get("PYTHONPATH", ""), TOOLS_DIR) if p),
               "COVERAGE_FILE": DATA_FILE}
    with tempfile.TemporaryDirectory(prefix="envfarm-cov-") as tmp:
        tools = Path(tmp) / "tools"
        if not tools_tree(tools):
            return None, "coverage and pytest-cov are not installed (pip install coverage pytest-cov)"
        command = f"{project.env.test_cmd} {ARGS}"
        async with TestSession.open(backend, image, project.files, command, run_env) as session:
            await session.sb.upload(tools, TOOLS_DIR)
            t0 = time.monotonic()
            run = await session.run(test_paths, timeout)
            took = time.monotonic() - t0
            if run.timed_out:
                return None, f"the suite under coverage did not finish within {timeout:.0f}s"
            if not (await session.sb.exec(["test", "-s", DATA_FILE])).ok:
                return None, f"the run under coverage wrote no data; the log ends:\n{tail(run.log, 5)}"
            raw = await session.sb.read_file(DATA_FILE)
        data_file = Path(tmp) / "coverage.data"
        data_file.write_bytes(raw)
        found = from_data(data_file, run.log, took, source_files, passing_files)
    if found is None:
        return None, "coverage measured none of the source files"
    return found, ""


def to_cache(found: CoverageMap | None, why: str, stamp: str) -> dict[str, Any]:
    return {"stamp": stamp, "map": found.to_json() if found else None, "why": why}


def from_cache(data: Mapping[str, Any]) -> tuple[CoverageMap | None, str]:
    return (CoverageMap.from_json(data["map"]) if data.get("map") else None), str(data.get("why", ""))
