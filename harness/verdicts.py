"""Whose fault is a test run that hung or ran out of memory: the patch's, or the environment's.

A patch whose tests loop forever or allocate without bound is a model failure: reward 0, reason ``timeout``
or ``oom``, recorded once and never replayed. An environment that cannot run the instance's tests within the
budget at all (a slow machine, a timeout set too low, a memory cap too small for the suite) is an infra
error, retried and counted apart. The evidence that tells them apart is the **baseline**: the same test
command on the unpatched base commit (with test_patch; canaries and twins off) in the same image with the same
limits. When the baseline finishes inside the budget, the patch caused the hang; when the baseline also
hangs or is OOM-killed, the environment did. A sandbox that dies without a timeout or an OOM kill, or a
daemon error, is infra without any baseline.

Baselines run once per (image, limits, timeout) and are cached as JSON under
``config.home()/harness/baselines/``; concurrent requests for the same key share one run.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from envfarm.config import home
from envfarm.sandbox import Backend, Limits

from .grading import ErrorKind
from .run import Attempt, eval_script, run_attempt
from .specs import Plan
from .tamper import Policy

log = logging.getLogger(__name__)

SCHEMA = 1
FIT_SHARE = 0.5
STOPPED = frozenset({"timeout", "oom"})
"""Attempt results that need the baseline's evidence before anyone is blamed."""


@dataclass(frozen=True)
class Baseline:
    """How the unpatched base ran in one image under one set of limits."""

    result: str
    """The baseline attempt's result: "graded" (finished in time), "timeout", "oom", "test_patch_failed"."""
    tests_s: float
    """Seconds its tests ran."""
    timeout_s: float
    """The budget it ran under."""

    @property
    def fits(self) -> bool:
        """The base finishes well inside the budget (at most :data:`FIT_SHARE` of it): a hang or OOM of a
        patched run is then the patch's doing. A base that needs most of the budget proves nothing."""
        return self.result == "graded" and self.tests_s <= FIT_SHARE * self.timeout_s


class Baselines:
    """Baseline runs, cached on disk and shared between concurrent callers."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder or home() / "harness" / "baselines"
        self._running: dict[str, asyncio.Task[Baseline]] = {}

    async def get(
        self, backend: Backend, image: str, limits: Limits, plan: Plan, timeout_s: float
    ) -> Baseline:
        key = _key(image, limits, timeout_s, plan)
        path = self.folder / f"{key}.json"
        cached = await asyncio.to_thread(_load, path)
        if cached is not None:
            return cached
        task = self._running.get(key)
        if task is None:
            task = asyncio.ensure_future(self._run(backend, image, limits, plan, timeout_s, path))
            self._running[key] = task
            task.add_done_callback(lambda _t: self._running.pop(key, None))
        return await asyncio.shield(task)

    async def judge(
        self, backend: Backend, image: str, limits: Limits, plan: Plan, timeout_s: float, attempt: Attempt
    ) -> tuple[ErrorKind, Attempt]:
        """The error kind of a timed-out or OOM-killed ``attempt`` and the attempt with the evidence as its
        message (:func:`classify`, :func:`describe`), from the cached or a fresh baseline."""
        base = await self.get(backend, image, limits, plan, timeout_s)
        kind = classify(attempt, base)
        return kind, replace(attempt, message=describe(kind, attempt, base, timeout_s, limits.memory_mb))

    async def _run(
        self, backend: Backend, image: str, limits: Limits, plan: Plan, timeout_s: float, path: Path
    ) -> Baseline:
        log.info("baseline run of %s in %s (timeout %.0fs)", plan.instance.instance_id, image, timeout_s)
        att = await run_attempt(backend, image, limits, plan, None, Policy.OFF, timeout_s, canaries=False,
                                differential=False)
        found = Baseline(att.result, round(att.timings.get("tests_s", 0.0), 3), timeout_s)
        await asyncio.to_thread(_save, path, found)
        return found


def classify(attempt: Attempt, baseline: Baseline) -> ErrorKind:
    """The error kind of a timed-out or OOM-killed ``attempt`` given the baseline's evidence."""
    if attempt.result == "timeout":
        return ErrorKind.TIMEOUT if baseline.fits else ErrorKind.ENV_TIMEOUT
    if attempt.result == "oom":
        return ErrorKind.OOM if baseline.fits else ErrorKind.ENV_OOM
    raise ValueError(f"attempt result {attempt.result!r} is neither a timeout nor an OOM kill")


def describe(kind: ErrorKind, attempt: Attempt, baseline: Baseline, timeout_s: float, memory_mb: int) -> str:
    """The error message of a classified attempt, with the evidence."""
    ran = f"finishes in {baseline.tests_s:.1f}s"
    base = f"the unpatched base {ran if baseline.result == 'graded' else 'ends in ' + baseline.result}"
    if kind is ErrorKind.TIMEOUT:
        return f"the tests ran past {timeout_s:.0f}s with the patch; {base} (a model failure)"
    if kind is ErrorKind.OOM:
        return f"the tests were OOM-killed ({memory_mb} MB) with the patch; {base} (a model failure)"
    limit = f"--timeout {timeout_s:.0f}s" if attempt.result == "timeout" else f"the {memory_mb} MB memory cap"
    return (f"the tests hit {limit} and {base} too: the environment cannot run them in this budget "
            "(raise the limit or the spec's timeout_s)")


def _key(image: str, limits: Limits, timeout_s: float, plan: Plan) -> str:
    text = json.dumps(
        [SCHEMA, image, asdict(limits), timeout_s, eval_script(plan), plan.instance.test_patch], default=str
    )
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _load(path: Path) -> Baseline | None:
    try:
        data = json.loads(path.read_text())
        return Baseline(str(data["result"]), float(data["tests_s"]), float(data["timeout_s"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _save(path: Path, found: Baseline) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(found)))
    tmp.replace(path)
