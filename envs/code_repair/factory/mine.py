"""``envfarm tasks mine``: real PyPI projects in, harness-validated SWE-bench rows out.

    config = MineConfig(packages=("cachetools==5.3.3",), out=Path("mined/tasks.jsonl"), max_tasks=40)
    report = asyncio.run(mine(config, progress=print))      # MineReport; rows in config.out

Per package: download the sdist on the host, build the harness env image from its test dependencies,
run the suite twice in a sandbox (``prepare.py``), then try mutants (``mutate.py``) in a seeded order,
each in one of ``jobs`` long-lived sandboxes (``runner.py``): a mutant is kept when some baseline tests
fail and the others pass. Kept mutants become git commits and rows (``repo.py``); every row is validated
by the harness (``validate.py``) before it is written. Deterministic for a seed: the candidate order
depends only on the seed and the sdist, and the rows are the first ``max_tasks`` kept mutants in that
order. Resumable: outcomes are appended to ``<out>.work/`` as they finish and reused on the next run.
"""

from __future__ import annotations

import asyncio
import difflib
import functools
import itertools
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from envfarm.errors import ConfigError, FarmError, SandboxError
from envfarm.harness.screen import Suspicion, screen_patch
from envfarm.sandbox import Backend, get_backend
from envfarm.sandbox.values import IMAGE_BACKEND

from . import repo as repo_mod
from .covmap import mutation_lines
from .mutate import Mutation, combine, distinct, sites
from .prepare import Prepared, prepare, test_files_for
from .recipe import RECIPES_FILE
from .runner import TestRun, TestSession
from .sdist import PackageSpec, parse_spec
from .state import Outcome, WorkFolder, write_jsonl
from .statement import problem_statement
from .validate import Verdict, validate

log = logging.getLogger(__name__)

SESSION_TRIES = 3
"""Sandboxes a mutant worker may lose in a row, no mutant recorded in between, before the package fails."""
CRASHES_TO_JUDGE = 2
"""Sandboxes one mutant may take down before it is recorded ``crashed`` (it hangs the in-sandbox agent)."""
CHUNK_PER_TASK = 2
"""Candidates checked (compiled, compared) at a time, per task wanted: more are checked as the loop needs."""


class MineConfig(BaseModel):
    """Options of :func:`mine` (what ``envfarm tasks mine`` parses its options into)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    packages: tuple[str, ...] = Field(min_length=1)
    """``NAME==VERSION`` of each PyPI project to mine, in output order."""
    out: Path
    """The output JSONL; ``<out>.work/`` holds the resumable state."""
    max_tasks: int = Field(50, ge=1)
    """Validated tasks to emit per package (fewer when its mutants run out)."""
    max_mutants: int | None = Field(None, ge=1)
    """Single-edit mutants tried per package at most (default: 10 x max_tasks x mutations)."""
    mutations: int = Field(1, ge=1, le=5)
    """Edits per task: K > 1 combines K kept single-edit mutants of one file into one task (harder)."""
    seed: int = 0
    """Orders the mutation sites; the same seed gives the same rows."""
    backend: str = IMAGE_BACKEND
    """Sandbox backend for the baseline and mutant test runs (docker or bwrap); validation uses docker."""
    jobs: int = Field(2, ge=1)
    """Sandboxes testing mutants at the same time."""
    validate_workers: int = Field(4, ge=1)
    """Harness instances built and run at the same time during validation."""
    harness_check: bool = True
    """Validate every row with the harness before writing it (turn off only for debugging)."""
    find_links: tuple[Path, ...] = ()
    """Download sdists from these folders instead of PyPI (offline tests)."""
    recipes: Path = RECIPES_FILE
    """The recipe table (per-project test dependency and test selection overrides)."""
    coverage: bool = True
    """Run each mutant only on the test files that execute its lines, and skip mutants on lines no passing
    test executes (one run of the suite under coverage per package); off: test files chosen by name."""


@dataclass(frozen=True)
class Progress:
    """A progress event for the CLI."""

    stage: str
    """``prepare``, ``mutants``, ``validate`` or ``done``."""
    package: str
    done: int = 0
    total: int = 0
    kept: int = 0
    detail: str = ""


@dataclass(frozen=True)
class PackageReport:
    package: str
    candidates: int
    """Mutation sites found (before the compile check: only those the mutant loop reaches get it)."""
    tried: int
    """Mutants with an outcome (cached ones included)."""
    ran: int
    """Mutants whose tests ran in this invocation."""
    kept: int
    validated: int
    emitted: int
    tests_passing: int
    baseline_s: float
    prepare_s: float
    mine_s: float
    verdicts: dict[str, int] = field(default_factory=dict)
    origin: str = ""
    """How the test paths were found (``discover.Layout.origin``)."""
    in_package: bool = False
    """The tests ship inside the package (``pkg/tests/``)."""
    test_files: int = 0


@dataclass(frozen=True)
class MineReport:
    out: Path
    rows: int
    packages: tuple[PackageReport, ...]
    wall_s: float
    validate_s: float
    invalid: tuple[str, ...]


ProgressFn = Callable[[Progress], None]


def order(candidates: Sequence[Mutation], seed: int, name: str) -> list[Mutation]:
    """The seeded trial order: shuffled, then dealt round-robin by kind (a mix of operators early)."""
    rng = random.Random(f"{seed}:{name}")
    shuffled = list(candidates)
    rng.shuffle(shuffled)
    by_kind: dict[str, list[Mutation]] = {}
    for m in shuffled:
        by_kind.setdefault(m.kind, []).append(m)
    out: list[Mutation] = []
    queues = [by_kind[k] for k in sorted(by_kind)]
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


async def mine(config: MineConfig, progress: ProgressFn | None = None) -> MineReport:
    """Mine every package of ``config``, validate, write ``config.out``; see the module docstring.

    A pipeline: while package N+1 is prepared and mined, the rows of package N are validated by the
    harness (one validation run at a time). Packages that lose rows in validation are topped up after."""
    specs = [parse_spec(p) for p in config.packages]
    if len({s.name for s in specs}) != len(specs):
        raise ConfigError("--package names a project twice; give each project once")
    emit = progress or (lambda event: None)
    work = WorkFolder(config.out)
    t0 = time.monotonic()
    backend = get_backend(config.backend)
    # harness images are docker images: validation runs on docker whatever backend mines (bwrap would
    # export every instance image to a rootfs); one docker backend object for both when mining on docker
    checker = backend if backend.name == "docker" else get_backend("docker")
    pipeline = _Validation(config, work, checker, emit)
    miners: list[_Miner] = []
    try:
        try:
            async with asyncio.TaskGroup() as tg:
                for spec in specs:
                    miner = await _Miner.start(spec, config, work, backend, emit)
                    miners.append(miner)
                    await miner.mine_until(config.max_tasks)
                    tg.create_task(pipeline.run(miner))
        except* FarmError as group:  # one error line in the CLI, not an exception group
            raise _first(group) from None
        for _ in range(2):  # top up packages that lost rows in validation, then validate the new rows
            short = [m for m in miners if m.valid_count(pipeline.verdicts) < config.max_tasks
                     and m.can_continue()]
            if not short or not config.harness_check:
                break
            for m in short:
                await m.mine_until(config.max_tasks + m.invalid_count(pipeline.verdicts))
                await pipeline.run(m)
    finally:
        await backend.aclose()
        if checker is not backend:
            await checker.aclose()
    verdicts = pipeline.verdicts
    final = []
    for miner in miners:
        mine_rows = pipeline.rows.get(miner.prepared.project.key, [])
        final += [r for r in mine_rows if verdicts[r["instance_id"]].ok][: config.max_tasks]
    write_jsonl(config.out, final)
    emit(Progress("done", "", len(final), len(final)))
    reports = tuple(m.report(verdicts, sum(r["repo"] == m.prepared.project.repo for r in final))
                    for m in miners)
    invalid = tuple(sorted(i for i, v in verdicts.items() if not v.ok))
    return MineReport(config.out, len(final), reports, time.monotonic() - t0, pipeline.seconds, invalid)


def _first(group: BaseExceptionGroup[FarmError]) -> FarmError:
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    assert isinstance(error, FarmError)
    return error


class _Validation:
    """Validates one package's rows at a time (harness run id ``mine-validate-<key>``); keeps verdicts."""

    def __init__(self, config: MineConfig, work: WorkFolder, backend: Backend, emit: ProgressFn) -> None:
        self.config, self.work, self.backend, self.emit = config, work, backend, emit
        self.verdicts: dict[str, Verdict] = {}
        self.rows: dict[str, list[dict[str, Any]]] = {}
        self.seconds = 0.0
        self._lock = asyncio.Lock()

    async def run(self, miner: _Miner) -> None:
        async with self._lock:
            key, name = miner.prepared.project.key, miner.prepared.project.spec.name
            rows = await asyncio.to_thread(miner.rows)
            self.rows[key] = rows
            todo = [r for r in rows if r["instance_id"] not in self.verdicts]
            if not todo:
                return
            if not self.config.harness_check:
                self.verdicts.update({r["instance_id"]: Verdict(True, False) for r in todo})
                return
            done, total = 0, 2 * len(todo)  # a gold run and a run of the unfixed code per row
            new = {r["instance_id"] for r in todo}

            def on_event(event: Any) -> None:
                nonlocal done
                if event.instance_id in new and event.phase in ("done", "skipped"):
                    done += 1
                    self.emit(Progress("validate", name, done, total))

            self.emit(Progress("validate", name, 0, total))
            # every row of the project: those validated before resume from their reports (no run), so the
            # project's validate.json lists all of its rows, not only the last batch's
            found, took = await validate(rows, self.work, self.backend, self.config.validate_workers,
                                         on_event, f"mine-validate-{key}")
            self.verdicts.update(found)
            self.seconds += took


class _Miner:
    """One package: its candidates, cached outcomes, and the mutant loop."""

    def __init__(self, prepared: Prepared, config: MineConfig, work: WorkFolder, backend: Backend,
                 emit: ProgressFn, prepare_s: float) -> None:
        self.prepared, self.config, self.work, self.backend, self.emit = prepared, config, work, backend, emit
        p = prepared.project
        found = [m for f in prepared.layout.source_files for m in sites(f, p.files[f])]
        limit = config.max_mutants or 10 * config.max_tasks * config.mutations
        self.total_candidates = len(found)
        # candidates are compiled and compared (a whole-file compile each) a chunk at a time, as the mutant
        # loop reaches them: a project that keeps its tasks in 100 tries never checks the other 400
        self._source = itertools.islice(distinct(order(found, config.seed, p.spec.name), p.files), limit)
        self._chunk = CHUNK_PER_TASK * config.max_tasks * config.mutations
        self._exhausted = False
        self.candidates: list[Mutation] = []
        self._extend()
        self.outcomes = work.read_outcomes(p.key, prepared.stamp)
        self.ran = 0
        self.crashes: dict[str, int] = {}
        self.prepare_s, self.mine_s = prepare_s, 0.0

    @classmethod
    async def start(cls, spec: PackageSpec, config: MineConfig, work: WorkFolder, backend: Backend,
                    emit: ProgressFn) -> _Miner:
        emit(Progress("prepare", spec.name, detail="sdist, test environment, baseline"))
        t0 = time.monotonic()
        prepared = await prepare(spec, work, backend, config.find_links, config.recipes, config.coverage)
        # a thread: finding and checking candidates parses every source file (seconds on a large project)
        return await asyncio.to_thread(cls, prepared, config, work, backend, emit, time.monotonic() - t0)

    def kept(self) -> list[Mutation]:
        """The mutants that become tasks: kept singles, or with ``mutations`` K > 1 kept K-edit combinations,
        in candidate order over the prefix that has outcomes; equivalent tasks (one file, the same problem
        statement: the same failing tests failing the same way) once."""
        chosen = self._kept_prefix(self.candidates if self.config.mutations == 1 else self.combos())
        seen: set[tuple[str, str]] = set()
        out = []
        for m in chosen:
            key = (m.file, self.outcomes[m.id].problem_statement)
            if key not in seen:
                seen.add(key)
                out.append(m)
        return out

    def _kept_prefix(self, candidates: Sequence[Mutation]) -> list[Mutation]:
        out = []
        for m in candidates:
            o = self.outcomes.get(m.id)
            if o is None:
                break
            if o.verdict == "kept":
                out.append(m)
        return out

    def combos(self) -> list[Mutation]:
        """K-edit mutants of one file from kept singles, in the order their last edit was kept (so the list
        only grows as more singles are kept); edits on distinct lines, spans apart."""
        k, files = self.config.mutations, self.prepared.project.files
        pending: dict[str, list[Mutation]] = {}
        out = []
        for m in self._kept_prefix(self.candidates):
            group = pending.setdefault(m.file, [])
            if any(g.line == m.line or (g.start < m.end and m.start < g.end) for g in group):
                continue
            group.append(m)
            if len(group) == k:
                out.append(combine(group, files[m.file]))
                pending[m.file] = []
        return out

    def _extend(self) -> bool:
        """Check the next chunk of candidates (blocking: call in a thread); False when none are left."""
        more = list(itertools.islice(self._source, self._chunk))
        self._exhausted = len(more) < self._chunk
        self.candidates += more
        return bool(more)

    async def _untried_singles(self) -> bool:
        """Some candidate has no outcome yet (the next chunk is checked when all have one)."""
        if any(m.id not in self.outcomes for m in self.candidates):
            return True
        return not self._exhausted and await asyncio.to_thread(self._extend)

    def can_continue(self) -> bool:
        return not self._exhausted or any(m.id not in self.outcomes for m in (*self.candidates,
                                                                              *self.combos()))

    async def mine_until(self, target: int) -> None:
        """Try mutants in order until ``target`` tasks are kept (over a finished prefix) or none are left."""
        name = self.prepared.project.spec.name
        self.emit(Progress("mutants", name, len(self.outcomes), len(self.candidates), len(self.kept())))
        t0 = time.monotonic()
        try:
            while len(self.kept()) < target:
                combos = self.combos() if self.config.mutations > 1 else []
                if any(c.id not in self.outcomes for c in combos):
                    await self._run(combos, lambda: len(self.kept()) >= target)
                elif not await self._untried_singles():
                    return
                elif self.config.mutations == 1:
                    await self._run(self.candidates, lambda: len(self.kept()) >= target)
                else:
                    await self._run(self.candidates, functools.partial(self._combos_beyond, len(combos)))
        finally:
            self.mine_s += time.monotonic() - t0

    def _combos_beyond(self, count: int) -> bool:
        return len(self.combos()) > count

    async def _run(self, candidates: Sequence[Mutation], done: Callable[[], bool]) -> None:
        """Test the candidates without an outcome, in order, in ``jobs`` sandboxes, until ``done()``."""
        queue = [m for m in candidates if m.id not in self.outcomes]
        if done() or not queue:
            return
        lock = asyncio.Lock()
        p, name = self.prepared, self.prepared.project.spec.name

        async def worker() -> None:
            failures = 0  # sandboxes lost in a row, without a mutant recorded in between
            while True:
                ran = self.ran
                try:
                    async with TestSession.open(self.backend, p.image, p.project.files,
                                                p.project.env.test_cmd, p.env) as session:
                        await self._drain(session, queue, lock, done)
                    return
                except SandboxError as e:  # a sandbox that died: its mutant goes back, a new sandbox
                    failures = 1 if self.ran > ran else failures + 1
                    if failures >= SESSION_TRIES:
                        raise
                    log.warning("%s: mutant sandbox failed (%s); starting another", name, e)

        async with asyncio.TaskGroup() as tg:
            for _ in range(min(self.config.jobs, len(queue))):
                tg.create_task(worker())

    async def _drain(self, session: TestSession, queue: list[Mutation], lock: asyncio.Lock,
                     done: Callable[[], bool]) -> None:
        while True:
            async with lock:
                if not queue or done():
                    return
                m = queue.pop(0)
            try:
                outcome = await self._try(session, m)
            except SandboxError:
                self.crashes[m.id] = self.crashes.get(m.id, 0) + 1
                if self.crashes[m.id] < CRASHES_TO_JUDGE:
                    queue.insert(0, m)
                else:  # it takes its sandbox down every time: a verdict on the mutant, not an infra failure
                    self._record(m, Outcome(m.id, "crashed"))
                raise
            except BaseException:
                queue.insert(0, m)
                raise
            self._record(m, outcome)

    def _record(self, m: Mutation, outcome: Outcome) -> None:
        p, name = self.prepared, self.prepared.project.spec.name
        self.outcomes[m.id] = outcome
        self.work.append_outcome(p.project.key, p.stamp, outcome)
        self.ran += 1
        self.emit(Progress("mutants", name, len(self.outcomes), len(self.candidates), len(self.kept()),
                           detail=f"{m.kind} {m.file}:{m.line}"))

    async def _try(self, session: TestSession, m: Mutation) -> Outcome:
        p = self.prepared
        original = p.project.files[m.file]
        if suspect_fix(m, original):
            return Outcome(m.id, "suspect-fix")
        files = test_files_for(m.file, p.passing_files, p.project.files)
        ran, timeout = files, p.mutant_timeout_s
        if p.coverage is not None:
            lines = await asyncio.to_thread(mutation_lines, original, m.start, m.end, m.line)
            chosen = p.coverage.select(m.file, lines)
            if chosen == ():
                return Outcome(m.id, "uncovered")
            if chosen is not None:
                ran, timeout = chosen, p.timeout_for(chosen)
        run = await session.run_mutant(m.file, m.apply(original), original, ran, timeout)
        return judge(m, run, sorted({*files, *ran}), p, ran)

    def rows(self) -> list[dict[str, Any]]:
        """Rows of the kept mutants (the repository is written to the work folder)."""
        p = self.prepared
        bugs = []
        for m in self.kept():
            o = self.outcomes[m.id]
            bugs.append(repo_mod.Bug(m, o.hidden, o.fail_to_pass, o.pass_to_pass, o.problem_statement))
        path = repo_mod.materialize(p.project, bugs, self.work.repos)
        return repo_mod.rows(p.project, bugs, path)

    def _counts(self, verdicts: dict[str, Verdict]) -> tuple[int, int]:
        ids = {repo_mod.Bug(m, (), (), (), "").instance_id(self.prepared.project) for m in self.kept()}
        ok = sum(1 for i in ids if i in verdicts and verdicts[i].ok)
        return ok, sum(1 for i in ids if i in verdicts) - ok

    def valid_count(self, verdicts: dict[str, Verdict]) -> int:
        return self._counts(verdicts)[0]

    def invalid_count(self, verdicts: dict[str, Verdict]) -> int:
        return self._counts(verdicts)[1]

    def report(self, verdicts: dict[str, Verdict], emitted: int) -> PackageReport:
        counts: dict[str, int] = {}
        for o in self.outcomes.values():
            counts[o.verdict] = counts.get(o.verdict, 0) + 1
        p = self.prepared
        return PackageReport(str(p.project.spec), self.total_candidates, len(self.outcomes), self.ran,
                             len(self.kept()), self.valid_count(verdicts), emitted, len(p.passing),
                             round(p.baseline_s, 2), round(self.prepare_s, 1), round(self.mine_s, 1),
                             dict(sorted(counts.items())), p.layout.origin, p.layout.in_package,
                             len(p.layout.test_files))


def suspect_fix(m: Mutation, original: bytes) -> tuple[Suspicion, ...]:
    """What the harness's static screen (``harness/screen.py``) says of the mutant's fix, the row's gold
    patch: a fix that restores ``atexit.register``, ``os._exit``, a ``builtins`` rebinding or a write into
    ``sys.modules`` reads as a forgery, and under ``--strict`` its task could never be resolved, so such a
    mutant is not tried (outcome ``suspect-fix``)."""
    name = m.file
    before = m.apply(original).decode(errors="replace").splitlines(keepends=True)
    after = original.decode(errors="replace").splitlines(keepends=True)
    patch = "".join(difflib.unified_diff(before, after, f"a/{name}", f"b/{name}"))
    return screen_patch(f"diff --git a/{name} b/{name}\n{patch}")


def judge(m: Mutation, run: TestRun, files: Sequence[str], p: Prepared,
          ran: Sequence[str] | None = None) -> Outcome:
    """Keep a mutant when some baseline tests of ``files`` fail and the others pass. Only the ``ran`` files
    (default: all) ran: coverage showed the others never reach the edit, so they count as passing."""
    stats = dict(exit_code=run.exit_code, duration_s=round(run.duration_s, 3))
    if run.timed_out:
        return Outcome(m.id, "timeout", **stats)  # type: ignore[arg-type]
    chosen, run_files = set(files), set(files if ran is None else ran)
    selected = [t for t in p.passing if t.split("::", 1)[0] in chosen]
    failing = tuple(t for t in selected
                    if t.split("::", 1)[0] in run_files and run.statuses.get(t) != "PASSED")
    if not failing:
        return Outcome(m.id, "survived", **stats)  # type: ignore[arg-type]
    if len(failing) == len(selected):
        return Outcome(m.id, "broken", **stats)  # type: ignore[arg-type]
    hidden = tuple(sorted({t.split("::", 1)[0] for t in failing}))
    p2p = tuple(t for t in p.passing if t.split("::", 1)[0] in hidden and t not in set(failing))
    text = problem_statement(p.project.spec.name, failing, len(p2p), run.log, m.file)
    return Outcome(m.id, "kept", failing, p2p, hidden, text, run.log, **stats)  # type: ignore[arg-type]
