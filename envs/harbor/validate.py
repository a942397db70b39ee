"""Validate Harbor task directories here: does each build offline, does its oracle score 1, does a no-op
agent score 0, and why not.

    result = await validate_tasks(ValidateConfig(tasks=Path("tasks"), report_dir=Path("reports")))
    result.json_path, result.markdown_path        # <report-dir>/validate.json, validate.md

Per task: the image is built from ``environment/Dockerfile`` (:func:`envfarm.sandbox.harbor_image.
ensure_task_image`, cached by content hash), then ``envfarm/Harbor-v0`` runs an episode with the oracle
(``solution/solve.sh``; ``repeat`` times) when the task has one, and one with a no-op agent that submits at
once. Each task's row is written to ``<report-dir>/runs/<run-id>/`` as soon as it is known, so a run with the
same run id resumes where it stopped; ``validate.json`` and ``validate.md`` are rewritten at the end with
every row (the ``--tasks`` folder written ``TASKS`` in the details, temporary folders by placeholder).
Every task that does not validate gets one reason from :data:`REASONS`:

====================  =================================================================================
``needs-network``     the Dockerfile downloads from the internet (curl/wget of a URL, git clone, npm, ...),
                      or the oracle's run failed on network access
``unsupported-base``  the Dockerfile starts FROM an image with no offline translation here
``build-failed``      the translated image did not build (apt or pip could not resolve, a RUN failed)
``verifier-failed``   the no-op agent scored above 0 (the tests pass an untouched task), or the verifier
                      wrote no reward
``oracle-failed``     the oracle's run scored below 1
``task-incomplete``   the oracle failed on files the verifier reads that the task does not ship (defects.py)
``needs-privileges``  the oracle failed and the Dockerfile sets a setuid/setgid bit, which sandboxes ignore
``timeout``           the oracle or the verifier ran past its timeout
``flaky``             the oracle's ``repeat`` runs scored differently
``unknown``           anything else (the detail says what happened)
====================  =================================================================================

A task without ``solution/solve.sh`` has no oracle: its ``oracle_reward`` is null and it validates when it
builds and the no-op agent scores 0.

A dataset too big to validate whole is estimated from a random sample: ``ValidateConfig(sample=N, seed=S)``
validates N of the task folders (:func:`sample_dirs`: ``random.Random(S)`` over the folder names, sorted,
after ``task_ids``), so a resumed run with the same sample and seed picks the same tasks; ``validate.json``
records ``"sample": {"n", "seed", "of"}`` and ``validate.md`` says "a random sample of N of M tasks (seed
S)". What can be told without building anything is :mod:`.check`'s (``envfarm harbor check``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from envfarm.errors import BackendUnavailable, ConfigError, FarmError, HarborTaskError, InfraError
from envfarm.sandbox import DEFAULT_BACKEND

from .defects import DEFECTS, task_defect
from .janitor import Janitor

log = logging.getLogger(__name__)

REASONS = ("needs-network", "unsupported-base", "build-failed", "verifier-failed", "oracle-failed", *DEFECTS,
           "timeout", "flaky", "unknown")
NETWORK = re.compile(r"Temporary failure in name resolution|Name or service not known|Network is unreachable|"
                     r"Could not resolve host|Failed to establish a new connection|Connection refused")
"""Evidence in a failing oracle run's output that it reached for the internet."""
SUBMIT = '{"name": "submit", "arguments": {}}'
Agent = Literal["oracle", "noop"]


@dataclass(frozen=True)
class TaskRow:
    """The validation of one task (a row of ``validate.json``)."""

    task: str
    built: bool
    oracle_reward: float | None
    """Mean reward of the oracle's runs; None when the task has no solution or did not build."""
    noop_reward: float | None
    reason: str | None
    """One of :data:`REASONS` when the task does not validate."""
    detail: str
    seconds: float
    python: str | None = None
    """The Python of the image actually built (the Dockerfile's base mapped to an envfarm Debian base)."""
    internet_requested: bool = False
    """The task's ``[environment] allow_internet``: never granted here."""

    @property
    def validated(self) -> bool:
        return self.reason is None


@dataclass(frozen=True)
class ValidateConfig:
    """What ``envfarm harbor validate`` parses its options into."""

    tasks: Path
    """A folder of Harbor task directories, or one task directory."""
    report_dir: Path
    task_ids: tuple[str, ...] = ()
    """Task directory names to validate (empty: every task)."""
    run_id: str = "validate"
    """Rows of earlier runs with this id are reused (the run resumes)."""
    max_workers: int = 2
    repeat: int = 1
    """Oracle runs per task (flakiness)."""
    backend: str = DEFAULT_BACKEND
    prune_images: bool = False
    """Remove what each task built once no task left in the run needs it (:mod:`.janitor`)."""
    sample: int | None = None
    """Validate a random sample of this many task folders (None: every one): :func:`sample_dirs`."""
    seed: int = 0
    """Seeds the sample: the same seed picks the same tasks (a resumed run too)."""

    def __post_init__(self) -> None:
        if self.max_workers < 1 or self.repeat < 1:
            raise ConfigError(f"max_workers and repeat must be at least 1, got {self.max_workers} and "
                              f"{self.repeat}")
        if self.sample is not None and self.sample < 1:
            raise ConfigError(f"sample must be at least 1 task, got {self.sample}; leave it out to validate "
                              "every task")


@dataclass(frozen=True)
class Sample:
    """The random sample a run validated (``validate.json``'s ``"sample"``)."""

    n: int
    """Tasks in the sample (all of them when the sample asked for more)."""
    seed: int
    of: int
    """Tasks it was drawn from (after ``task_ids``)."""


@dataclass(frozen=True)
class Validation:
    run_id: str
    rows: tuple[TaskRow, ...]
    json_path: Path
    markdown_path: Path
    sample: Sample | None = None
    """The random sample validated; None when every task was."""

    @property
    def reasons(self) -> Counter[str]:
        return Counter(r.reason for r in self.rows if r.reason)


@dataclass(frozen=True)
class Event:
    """Progress: ``stage`` of ``task`` began ("build", "oracle", "noop") or the task is "done"."""

    task: str
    stage: str
    row: TaskRow | None = None


ProgressFn = Callable[[Event], None]


@dataclass
class _Runs:
    """What the episodes of one task gave."""

    oracle: list[float] = field(default_factory=list)
    noop: float | None = None
    infos: list[dict[str, Any]] = field(default_factory=list)


async def validate_tasks(config: ValidateConfig, progress: ProgressFn | None = None) -> Validation:
    """Validate every task of ``config`` (``max_workers`` at once); write validate.json and validate.md."""
    from .task import select_dirs

    every = await asyncio.to_thread(select_dirs, config.tasks, list(config.task_ids) or None)
    folders = sample_dirs(every, config.sample, config.seed)
    sample = None if config.sample is None else Sample(len(folders), config.seed, len(every))
    rows_dir = config.report_dir / "runs" / config.run_id
    await asyncio.to_thread(rows_dir.mkdir, parents=True, exist_ok=True)
    order, janitor = await Janitor.plan(folders) if config.prune_images else (folders, None)
    gate = asyncio.Semaphore(config.max_workers)
    rows_by: dict[Path, TaskRow] = {}

    async def one(folder: Path) -> None:
        async with gate:
            found = (await _resumed(rows_dir, folder.name)
                     or await _loaded_and_validated(folder, config, progress, janitor))
            row = _placeholder(found, config.tasks)  # rows written by earlier versions too
            await asyncio.to_thread(_write_row, rows_dir, row)
            if janitor is not None:
                await janitor.done(folder)
        rows_by[folder] = row
        if progress:
            progress(Event(folder.name, "done", row))

    try:
        async with asyncio.TaskGroup() as group:
            for f in order:
                group.create_task(one(f))
    except* BackendUnavailable as caught:  # the machine, not a task: stop, record no row for it
        raise caught.exceptions[0] from None
    rows = tuple(rows_by[f] for f in folders)
    paths = await asyncio.to_thread(write_reports, config.report_dir, config.run_id, rows, sample)
    return Validation(config.run_id, rows, *paths, sample=sample)


def sample_dirs(folders: Sequence[Path], n: int | None, seed: int = 0) -> list[Path]:
    """``n`` of ``folders`` drawn by ``random.Random(seed)`` from them sorted by name, returned sorted by
    name; all of them when ``n`` is None or at least their number. The same folders and seed give the same
    sample."""
    ordered = sorted(folders, key=lambda f: f.name)
    if n is None or n >= len(ordered):
        return ordered
    return sorted(random.Random(seed).sample(ordered, n), key=lambda f: f.name)


async def _loaded_and_validated(folder: Path, config: ValidateConfig, progress: ProgressFn | None,
                                janitor: Janitor | None = None) -> TaskRow:
    """A task folder that does not load is a row too: without tests/test.sh it has no verifier."""
    from .task import load_task

    try:
        task = await asyncio.to_thread(load_task, folder)
    except HarborTaskError as e:
        return TaskRow(folder.name, False, None, None, *load_failure(e), 0.0)
    return await validate_one(task, config, progress, janitor)


def load_failure(error: HarborTaskError) -> tuple[str, str]:
    """The reason and detail of a task folder that does not load: without tests/test.sh it has no verifier
    (``verifier-failed``); anything else is ``unknown``."""
    return "verifier-failed" if "test.sh" in str(error) else "unknown", _first_lines(str(error))


async def validate_one(task: Any, config: ValidateConfig, progress: ProgressFn | None = None,
                       janitor: Janitor | None = None) -> TaskRow:
    """Build ``task``'s image, run its oracle (``config.repeat`` times) and a no-op agent; never raises for
    what the task does (a failure is the row's reason), raises BackendUnavailable for what the machine
    lacks (no row is written for it). ``janitor``: builds go through it
    (``--prune-images``)."""
    from envfarm.sandbox.harbor_image import ensure_task_image

    start = time.monotonic()
    internet = bool(task.allow_internet)

    def row(built: bool, reason: str | None, detail: str, runs: _Runs | None = None,
            python: str | None = None) -> TaskRow:
        oracle = sum(runs.oracle) / len(runs.oracle) if runs and runs.oracle else None
        return TaskRow(task.name, built, oracle, runs.noop if runs else None, reason, detail,
                       round(time.monotonic() - start, 3), python, internet)

    if progress:
        progress(Event(task.name, "build"))
    try:
        image = (await janitor.build(task.path) if janitor is not None
                 else await asyncio.to_thread(ensure_task_image, task.path))
    except BackendUnavailable:
        raise
    except FarmError as e:
        return row(False, getattr(e, "reason", None) or "build-failed", error_detail(str(e)))
    runs = _Runs()
    try:
        await _run_agents(task, config, runs, progress, image)
    except BackendUnavailable:
        raise
    except (InfraError, FarmError, TimeoutError) as e:
        why = "timeout" if isinstance(e, TimeoutError) else "unknown"
        return row(True, why, f"{type(e).__name__}: {_first_lines(str(e))}", runs, image.python)
    reason, detail = judge(runs, has_oracle=bool(task.has_solution), internet=internet)
    defect = task_defect(task.path, _output(runs)) if reason == "oracle-failed" else None
    if defect is not None:
        reason, detail = defect[0], f"{defect[1]}; {detail}"
    return row(True, reason, detail, runs, image.python)


async def _run_agents(task: Any, config: ValidateConfig, runs: _Runs, progress: ProgressFn | None,
                      image: Any) -> None:
    if task.has_solution:
        for _ in range(config.repeat):
            if progress:
                progress(Event(task.name, "oracle"))
            reward, info = await run_episode(task.path, config.backend, "oracle", image)
            runs.oracle.append(reward)
            runs.infos.append(info)
    if progress:
        progress(Event(task.name, "noop"))
    runs.noop, info = await run_episode(task.path, config.backend, "noop", image)
    runs.infos.append(info)


async def run_episode(task_dir: Path, backend: str, agent: Agent,
                      image: Any = None) -> tuple[float, dict[str, Any]]:
    """One ``envfarm/Harbor-v0`` episode of the task in ``task_dir``: the oracle's actions, or a submit at
    once; returns the final reward and info. ``image``: the task's image when the caller has built it
    already (else the env finds it by its content hash, once per episode)."""
    import gymnasium

    import envfarm.envs  # noqa: F401  (registers envfarm/Harbor-v0)

    image_for = None if image is None else (lambda _task: image)
    env = gymnasium.make("envfarm/Harbor-v0", tasks=task_dir, backend=backend, image_for=image_for).unwrapped
    try:
        await env.areset(seed=0)  # type: ignore[attr-defined]
        actions = [*env.oracle(), SUBMIT] if agent == "oracle" else [SUBMIT]  # type: ignore[attr-defined]
        reward, info = 0.0, {}
        for action in actions:
            _, step_reward, terminated, truncated, info = await env.astep(action)  # type: ignore[attr-defined]
            reward = float(step_reward)
            if terminated or truncated:
                break
        return reward, dict(info)
    finally:
        await env.aclose()  # type: ignore[attr-defined]


def judge(runs: _Runs, has_oracle: bool, internet: bool = False) -> tuple[str | None, str]:
    """The reason a built task does not validate (None when it does) and a detail."""
    if has_oracle and len(set(runs.oracle)) > 1:
        return "flaky", f"oracle rewards {runs.oracle}"
    if runs.noop is not None and runs.noop > 0:
        return "verifier-failed", f"the no-op agent scored {runs.noop:g}: the tests pass an untouched task"
    if not has_oracle:
        return None, "no solution/solve.sh: no oracle"
    if runs.oracle and runs.oracle[0] >= 1.0:
        return None, ""
    info = runs.infos[0] if runs.infos else {}
    why = str(info.get("reason") or "")
    output = _output(runs)
    if "timeout" in why or "timed out" in why:
        return "timeout", why
    if "reward" in why and ("missing" in why or "empty" in why or "no " in why):
        return "verifier-failed", why
    failures = _failures(output)
    if NETWORK.search(output) and not failures:
        asked = " (the task asked for internet)" if internet else ""
        return "needs-network", f"the oracle's run reached for the network{asked}: {_last_lines(output)}"
    evidence = failures or _last_lines(output)
    return "oracle-failed", f"oracle reward {runs.oracle[0]:g}; {why} {evidence}".strip()


def _output(runs: _Runs) -> str:
    """The first oracle run's verifier output."""
    info = runs.infos[0] if runs.infos else {}
    return str(info.get("verifier_output") or info.get("output") or "")


_TEST_FAILED = re.compile(r"^(FAILED \S+|=+ .*\b\d+ failed\b.* =+|--- FAIL: \S+)", re.MULTILINE)
"""A test runner's own report of failing tests (pytest's summary and FAILED lines, go test's)."""


def _failures(output: str, limit: int = 400) -> str:
    """The verifier's tests that failed, from the runner's summary ("" when it reported none): evidence
    that the verifier ran, so a network error elsewhere in its output is not why the oracle failed."""
    found = [m.group(1) for m in _TEST_FAILED.finditer(output)]
    return " | ".join(found[-4:])[-limit:]


TEMP_NAMES = ((re.compile(r"[\w./]*envfarm-verify-[0-9a-f]+"), "VERIFY"),
              (re.compile(r"/tmp/envfarm-wheelhouse"), "WHEELHOUSE"),
              (re.compile(r"/tmp/[\w.-]+(?=/)"), "TMP"))
"""Temporary folders in a detail, by placeholder: the verifier's folder (with the relative or cut-off prefix a
runner may print before it), the build's wheelhouse, any other."""


def placeholders(text: str, tasks: Path) -> str:
    """``text`` with the tasks folder written ``TASKS`` and temporary folders by placeholder (reports name
    no machine's paths and no per-run folder names)."""
    text = text.replace(str(tasks.resolve()), "TASKS").replace(str(tasks), "TASKS")
    for pattern, name in TEMP_NAMES:
        text = pattern.sub(name, text)
    return text


def _placeholder(row: TaskRow, tasks: Path) -> TaskRow:
    return replace(row, detail=placeholders(row.detail, tasks))


def error_detail(text: str, limit: int = 400) -> str:
    """An error's first line and its last lines that are not a ``fix:`` hint (where a build log says
    what failed)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    tail = [line for line in lines[1:] if not line.startswith("fix:")][-2:]
    return " | ".join(lines[:1] + tail)[:limit]


def _first_lines(text: str, n: int = 3, limit: int = 400) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[:n])[:limit]


def _last_lines(text: str, n: int = 3, limit: int = 400) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-n:])[-limit:]


# ------------------------------------------------------------------------------------------------ reports


def _row_path(rows_dir: Path, name: str) -> Path:
    return rows_dir / (re.sub(r"[^A-Za-z0-9._-]", "_", name) + ".json")


async def _resumed(rows_dir: Path, name: str) -> TaskRow | None:
    path = _row_path(rows_dir, name)
    if not await asyncio.to_thread(path.is_file):
        return None
    data = json.loads(await asyncio.to_thread(path.read_text))
    return TaskRow(**data)


def _write_row(rows_dir: Path, row: TaskRow) -> None:
    path = _row_path(rows_dir, row.task)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(row), indent=1))
    tmp.replace(path)


def write_reports(report_dir: Path, run_id: str, rows: Sequence[TaskRow],
                  sample: Sample | None = None) -> tuple[Path, Path]:
    """``validate.json`` (``{"run_id", "sample", "rows": [...]}``; ``"sample"`` is ``{"n", "seed", "of"}``
    or null) and ``validate.md`` in ``report_dir``."""
    report_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = report_dir / "validate.json", report_dir / "validate.md"
    data = {"run_id": run_id, "sample": asdict(sample) if sample else None, "rows": [asdict(r) for r in rows]}
    json_path.write_text(json.dumps(data, indent=1))
    md_path.write_text(markdown(run_id, rows, sample))
    return json_path, md_path


def _build_rate(rows: Sequence[TaskRow]) -> str:
    """`` B of the N tasks that need only Debian and PyPI packages built (P %).``: those that built or
    failed to build for a reason of their own (not the network, not an unsupported base, not a package
    Debian lacks); "" when there are none."""
    from envfarm.sandbox.harbor_image import NO_PACKAGE

    fair = [r for r in rows if r.built or (r.reason == "build-failed" and NO_PACKAGE not in r.detail)]
    if not fair:
        return ""
    built = sum(r.built for r in fair)
    return (f" {built} of the {len(fair)} tasks that need only Debian and PyPI packages built "
            f"({100 * built / len(fair):.1f} %).")


def markdown(run_id: str, rows: Sequence[TaskRow], sample: Sample | None = None) -> str:
    """A summary line, the counts per reason and one table row per task."""
    built = sum(r.built for r in rows)
    with_oracle = [r for r in rows if r.oracle_reward is not None]
    ok = sum(r.oracle_reward == 1.0 for r in with_oracle)
    reasons = Counter(r.reason for r in rows if r.reason)
    defective = sum(r.reason in DEFECTS for r in with_oracle)
    sound = f" ({ok} of {len(with_oracle) - defective} without a task defect)" if defective else ""
    which = (f"a random sample of {sample.n} of {sample.of} tasks (seed {sample.seed})" if sample
             else f"{len(rows)} tasks")
    lines = [f"# Harbor validation: {run_id}", "",
             f"{which}: {built} built; oracle 1 on {ok} of {len(with_oracle)} with a solution"
             f"{sound}; "
             f"no-op 0 on {sum(r.noop_reward == 0 for r in rows)} of {built} built; "
             f"{sum(r.validated for r in rows)} validate.{_build_rate(rows)}", ""]
    if reasons:
        lines += ["| reason | tasks |", "| --- | --- |"]
        lines += [f"| {k} | {reasons[k]} |" for k in REASONS if reasons[k]] + [""]
    lines += ["| task | built | oracle | no-op | python | reason | detail | s |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        cells = [r.task, "yes" if r.built else "no", num(r.oracle_reward), num(r.noop_reward),
                 r.python or "-", r.reason or "ok", r.detail.replace("|", "/")[:160], f"{r.seconds:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def num(value: float | None) -> str:
    """A reward for a table: ``-`` for none."""
    return "-" if value is None else f"{value:g}"


__all__ = ["REASONS", "Event", "Sample", "TaskRow", "ValidateConfig", "Validation", "error_detail", "judge",
           "load_failure", "markdown", "num", "placeholders", "run_episode", "sample_dirs", "validate_one",
           "validate_tasks", "write_reports"]
