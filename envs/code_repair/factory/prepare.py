"""Preparing one package for mining: sdist, layout, test environment image, baseline test run.

    prepared = await prepare(spec, config, work, backend, progress)
    prepared.project, prepared.layout, prepared.image, prepared.passing, prepared.stamp

The environment image is the harness's own env image (``harness.images.build_env`` on the spec this
writes to ``work/specs``), so mining and validation run the tests in the same environment. The baseline
runs the whole suite twice; only tests that pass both times count (flaky tests never become
FAIL_TO_PASS or PASS_TO_PASS). When no test passes because pytest stopped at modules it could not import
(dill's suite is written to run as scripts: some of its modules import their siblings by bare name), the
baseline runs once more with ``--continue-on-collection-errors``, which then stays in the test command of
the project's spec and rows: the modules that import are mined, the others never pass. Likewise a mark of a
plugin the factory leaves out (pytest-cov's ``no_cover``) under the project's ``filterwarnings = error``
(python-dateutil): ``-W ignore::pytest.PytestUnknownMarkWarning`` (:data:`RERUNS`).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import re
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from envfarm.errors import BackendUnavailable, ImageError, SandboxError, TaskFactoryError, tail
from envfarm.harness import SpecCatalog
from envfarm.harness.images import BuiltImage, build_env
from envfarm.sandbox import Backend
from envfarm.sandbox.recipes import load_base_recipe

from . import covmap, deps
from .covmap import CoverageMap
from .discover import Layout, find_layout
from .recipe import RECIPES_FILE, Recipe, in_recipe_file, load_recipe, read_recipes
from .repo import EnvRecipe, Project, make_project, write_spec
from .runner import TestSession
from .sdist import PackageSpec, Sdist, download, unpack
from .state import WorkFolder

log = logging.getLogger(__name__)

PYTEST = "python -m pytest -rA -p no:cacheprovider -o addopts= --tb=short"
HARNESS_TIMEOUT_S = 600.0
"""The harness's test timeout written into the specs (fixed, so the rows do not depend on timings)."""
CONTINUE_ON_COLLECTION_ERRORS = "--continue-on-collection-errors"
UNKNOWN_MARKS = "-W ignore::pytest.PytestUnknownMarkWarning"
RERUNS = (
    (re.compile(r"Interrupted: \d+ errors? during collection"), CONTINUE_ON_COLLECTION_ERRORS,
     "pytest stopped at test modules it cannot import; running the others"),
    (re.compile(r"PytestUnknownMarkWarning"), UNKNOWN_MARKS,
     "a mark of a plugin left out (pytest-cov's no_cover) is an error under the project's filterwarnings"),
)
"""When no test passes and the baseline log shows the pattern: the argument the test command gets for
another baseline (each at most once), and why."""
PYTEST_INTERNALS = re.compile(r"AttributeError: module '_pytest")
"""A suite written against pytest internals (``_pytest.monkeypatch.notset``) that a newer pytest removed."""
ALL_RUN = re.compile(r"\[100%\]\s*$")
"""pytest's progress column at the last test, ending the log: every test ran, the summary did not come."""
BASELINE_FILE, COVERAGE_FILE = "baseline.json", "coverage.json"
BASELINE_TIMEOUT_S = 600.0
"""A baseline run not finished by then fails the project (a hanging test, or a suite too slow to mine: every
mutant would run a fraction of it); it is not run a second time."""


@dataclass(frozen=True)
class Prepared:
    """A package ready for mutants."""

    project: Project
    recipe: Recipe
    layout: Layout
    image: str
    passing: tuple[str, ...]
    """Test ids that passed in both baseline runs (sorted)."""
    baseline_s: float
    stamp: str
    """Identifies the baseline (sdist, environment, command); cached outcomes are reused only under it."""
    env: Mapping[str, str]
    coverage: CoverageMap | None = None
    """Which test files run which lines (None: not measured, or the run failed; files chosen by name)."""

    @functools.cached_property
    def passing_files(self) -> tuple[str, ...]:
        """The test files holding the passing tests (sorted)."""
        return tuple(sorted({t.split("::", 1)[0] for t in self.passing}))

    @property
    def mutant_timeout_s(self) -> float:
        if self.recipe.timeout_s:
            return self.recipe.timeout_s
        return max(self.recipe.min_timeout_s, 4.0 * self.baseline_s)

    def timeout_for(self, files: Sequence[str]) -> float:
        """The timeout of a mutant run on ``files`` chosen by coverage (scaled to their time); the recipe's
        or the whole suite's otherwise."""
        if self.recipe.timeout_s or self.coverage is None:
            return self.mutant_timeout_s
        return self.coverage.timeout_s(files, self.recipe.min_timeout_s, self.mutant_timeout_s)


def test_command(recipe: Recipe, layout: Layout | None = None) -> str:
    """pytest with the project's own addopts dropped but its plugins (``-p``) and import mode kept."""
    kept = layout.config.kept_addopts if layout is not None else ()
    args = [*kept, *recipe.pytest_args, *(f"--ignore={p}" for p in recipe.ignore)]
    return " ".join([PYTEST, *map(shlex.quote, args)])


@dataclass(frozen=True)
class Inferred:
    """What the factory reads from an sdist before any sandbox runs (``envfarm tasks recipes --check``)."""

    spec: PackageSpec
    sdist: Sdist
    files: Mapping[str, bytes]
    recipe: Recipe
    layout: Layout
    dependencies: tuple[deps.Dependency, ...]
    test_cmd: str
    overrides: tuple[str, ...]
    """Recipe keys set for this project in the recipe file (empty: everything was inferred)."""

    def env_recipe(self, infer: bool = True) -> EnvRecipe:
        chosen = (d.requirement for d in self.dependencies if infer or not d.inferred)
        packages = sorted(chosen, key=str.lower)
        return EnvRecipe(tuple(packages), self.test_cmd, self.layout.pythonpath, HARNESS_TIMEOUT_S,
                         self.recipe.env)


def infer(spec: PackageSpec, sdists: Path, find_links: Sequence[Path] = (),
          recipes_file: Path = RECIPES_FILE) -> Inferred:
    """Download and read the sdist: layout, test dependencies, test command. Blocking (pip, tar)."""
    recipe = load_recipe(spec.name, recipes_file)
    sd = download(spec, sdists, find_links)
    files = unpack(sd)
    layout = find_layout(files, recipe, spec)
    found = deps.dependencies(files, recipe, load_base_recipe().python, layout)
    own = read_recipes(recipes_file).own(spec.name)
    overrides = tuple(k for k, v in own.model_dump().items() if v is not None) if own else ()
    return Inferred(spec, sd, files, recipe, layout, tuple(found), test_command(recipe, layout), overrides)


async def prepare(spec: PackageSpec, work: WorkFolder, backend: Backend, find_links: Sequence[Path] = (),
                  recipes_file: Path = RECIPES_FILE, coverage: bool = True) -> Prepared:
    """Download, inspect, build the env image, run the baseline and (``coverage``) the suite under coverage;
    all cached in the work folder."""
    found = await asyncio.to_thread(infer, spec, work.sdists, find_links, recipes_file)
    while True:
        try:
            p = await _prepare(found, work, backend)
            return replace(p, coverage=await _coverage(p, work, backend)) if coverage else p
        except _Rerun as e:
            log.warning("%s: %s (%s)", spec, e.why, e.argument)
            found = replace(found, test_cmd=f"{found.test_cmd} {e.argument}")


class _Rerun(TaskFactoryError):
    """No test passed for a reason one more pytest argument fixes (:data:`RERUNS`)."""

    def __init__(self, argument: str, why: str) -> None:
        super().__init__(why)
        self.argument, self.why = argument, why


def baseline_stamp(sdist_sha: str, image: str, test_cmd: str, test_paths: Sequence[str],
                   variables: Sequence[tuple[str, str]]) -> str:
    """What the baseline (and every outcome cached under it) depends on. The recipe's variables count: a
    recipe that sets one runs the suite again (none set: the same stamp as before variables counted)."""
    parts = [sdist_sha, image, test_cmd, *test_paths, *(f"env {k}={v}" for k, v in variables)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


async def _prepare(found: Inferred, work: WorkFolder, backend: Backend) -> Prepared:
    spec, recipe, layout, sd = found.spec, found.recipe, found.layout, found.sdist
    project, built = await _environment(found, work)
    env_recipe = project.env
    env = env_recipe.env
    stamp = baseline_stamp(sd.sha256, built.tag, env_recipe.test_cmd, layout.test_paths,
                           env_recipe.variables)
    cached = work.read_stamped(project.key, BASELINE_FILE, stamp)
    for attempt in (1, 2):
        if cached is not None:
            break
        try:
            cached = await _baseline(project, layout, built.tag, backend, env)
        except SandboxError as e:  # one retry: a sandbox killed from outside is not the package's fault
            if attempt == 2:
                raise TaskFactoryError(f"{spec}: the baseline test run failed twice: {e}") from e
            log.warning("%s: baseline sandbox failed (%s); trying again", spec, e)
            continue
        if not cached.get("timed_out"):  # not kept: a rerun (less load, a recipe) tries again
            cached["stamp"] = stamp
            work.write_stamped(project.key, BASELINE_FILE, cached)
    assert cached is not None
    log_tail = str(cached.get("log_tail", ""))
    if cached.get("timed_out"):
        raise TaskFactoryError(f"{spec}: the baseline test run did not finish within "
                               f"{BASELINE_TIMEOUT_S:.0f}s (a test hangs, or the suite is too slow to mine); "
                               f"the log ends:\n{tail(log_tail)}\n"
                               f"fix: {baseline_timeout_fix(log_tail, spec.name)}")
    passing = tuple(cached["passing"])
    for pattern, argument, why in RERUNS if not passing else ():
        if argument not in found.test_cmd and pattern.search(log_tail):
            raise _Rerun(argument, why)
    if not passing:
        raise TaskFactoryError(f"{spec}: no test of the sdist passes in its environment; the log ends:\n"
                               f"{tail(log_tail)}\nfix: {no_passing_fix(log_tail, spec.name)}")
    return Prepared(project, recipe, layout, built.tag, passing, float(cached["duration_s"]), stamp, env)


def baseline_timeout_fix(log_tail: str, name: str) -> str:
    """What to put in the recipe file when the baseline run does not finish, read from its log."""
    where = in_recipe_file(name)
    if ALL_RUN.search(log_tail):  # packaging: 62,423 tests in 96 s, then -rA's summary past 600 s
        return ("every test ran, then the run did not end: pytest's -rA summary of a suite this large is "
                'slow; leave the largest parametrized tests out '
                f'(pytest_args = ["--deselect", "FILE::TEST"] {where})')
    return f"leave the hanging test files out (ignore = [...] {where})"


def no_passing_fix(log_tail: str, name: str) -> str:
    """What to put in the recipe file when no test of a project passes, read from the baseline's log."""
    where = in_recipe_file(name)
    if PYTEST_INTERNALS.search(log_tail):
        return ("the suite uses pytest internals this pytest no longer has: pin an older pytest "
                f'(packages = ["pytest<X"] {where})')
    return f"add the missing test dependencies (packages = [...] {where})"


async def _coverage(p: Prepared, work: WorkFolder, backend: Backend) -> CoverageMap | None:
    """The project's coverage map, measured once per baseline stamp (a measurement the project failed is
    cached too, a sandbox failure is not; without a map the miner chooses test files by name)."""
    key = p.project.key
    cached = work.read_stamped(key, COVERAGE_FILE, p.stamp)
    if cached is None:
        try:
            found, why = await covmap.measure(p.project, p.layout.test_paths, p.image, backend, p.env,
                                              p.passing_files, p.layout.source_files, p.baseline_s)
        except SandboxError as e:  # not cached: the next run measures again
            log.warning("%s: the coverage run's sandbox failed (%s); test files are chosen by name",
                        p.project.spec, e)
            return None
        cached = covmap.to_cache(found, why, p.stamp)
        work.write_stamped(key, COVERAGE_FILE, cached)
    found, why = covmap.from_cache(cached)
    if found is None:
        log.warning("%s: test files are chosen by name, not by coverage: %s", p.project.spec, why)
    return found


async def _environment(found: Inferred, work: WorkFolder) -> tuple[Project, BuiltImage]:
    """The project and its built env image; when inferred dependencies break the build (a module name
    that is no PyPI project), once more with the declared ones only."""
    spec = found.spec
    tries = [True, False] if any(d.inferred for d in found.dependencies) else [False]
    for infer_deps in tries:
        env_recipe = found.env_recipe(infer_deps)
        project = make_project(spec, found.sdist.path.name, found.sdist.sha256, found.files, env_recipe)
        await asyncio.to_thread(write_spec, project, work.specs)
        env_spec = SpecCatalog([work.specs]).env(project.repo, spec.version)
        try:
            built, _ = await asyncio.to_thread(build_env, env_spec)
            return project, built
        except (ImageError, BackendUnavailable) as e:
            if infer_deps and isinstance(e, ImageError):
                log.warning("%s: the env with inferred dependencies did not build (%s); trying without them",
                            spec, tail(str(e), 3))
                continue
            raise TaskFactoryError(f"{spec}: the test environment did not build ({type(e).__name__}: {e}); "
                                   f"its packages are {list(env_recipe.packages)}: fix them with "
                                   f"packages/drop {in_recipe_file(spec.name)}") from e
    raise AssertionError("unreachable")


async def _baseline(project: Project, layout: Layout, image: str, backend: Backend,
                    env: Mapping[str, str]) -> dict[str, object]:
    t0 = time.monotonic()
    async with TestSession.open(backend, image, project.files, project.env.test_cmd, env) as session:
        first = await session.run(layout.test_paths, BASELINE_TIMEOUT_S)
        if first.timed_out:
            return {"passing": [], "flaky": [], "timed_out": True, "duration_s": first.duration_s,
                    "log_tail": tail(first.log, 30), "wall_s": time.monotonic() - t0}
        second = await session.run(layout.test_paths, BASELINE_TIMEOUT_S)
    passing = sorted(t for t, s in first.statuses.items()
                     if s == "PASSED" and second.statuses.get(t) == "PASSED" and "::" in t)
    flaky = sorted(t for t, s in first.statuses.items()
                   if (s == "PASSED") != (second.statuses.get(t) == "PASSED"))
    log.info("%s baseline: %d tests pass twice, %d flaky, %.1fs per run", project.spec, len(passing),
             len(flaky), (first.duration_s + second.duration_s) / 2)
    return {"passing": passing, "flaky": flaky, "duration_s": max(first.duration_s, second.duration_s),
            "log_tail": tail(first.log, 30), "wall_s": time.monotonic() - t0}


def test_files_for(module: str, passing_files: tuple[str, ...],
                   files: Mapping[str, bytes]) -> tuple[str, ...]:
    """The test files that mention ``module``'s import name; all of them when none does."""
    parts = module.removesuffix(".py").split("/")
    name = parts[-2] if parts[-1] == "__init__" and len(parts) > 1 else parts[-1]
    word = re.compile(rf"\b{re.escape(name)}\b".encode())
    chosen = tuple(f for f in passing_files if word.search(files.get(f, b"")))
    return chosen or passing_files
