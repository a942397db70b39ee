"""The forgery suite (envfarm.testing.exploits) against the harness on real docker, one test per forgery
class (class 5 is grader-aware, envfarm/testing/audit.py).

Each exploit is a patch that fixes nothing and tries to be graded resolved. Every class is run twice on the
toy repository: with SWE-bench's grading (``--tamper off --no-canaries``), where at least one exploit of the
class must resolve (so the suite bites and this test can fail), and with envfarm's defaults, where none may
(class 5, whose odds are measured rather than ruled out, only the first: see ``CLASSES``). The same
suite against real SWE-bench rows (flask, sympy) is ``bench/exploits.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from envfarm.harness import InstanceReport, Policy, grade
from envfarm.harness.images import ImageBuilder
from envfarm.harness.instances import instance_from_row
from envfarm.harness.run import run_attempt, sandbox_limits
from envfarm.harness.specs import Plan, SpecCatalog
from envfarm.sandbox import Backend, get_backend
from envfarm.testing.audit import GRADER_AWARE_CLASS, grader_aware
from envfarm.testing.exploits import Exploit, Target, exploits_for, render_patch
from envfarm.testing.toyrepo import KEY, PATCHES, row

pytestmark = [pytest.mark.docker, pytest.mark.slow]

TARGET = Target("pytest", "calc/__init__.py", ("tests/test_ops.py",))
CLASSES = (1, 2, 3, 4)
"""exploits.py's classes. Class 5, grader-aware (audit.grader_aware), forges only the failures of tests its
canary recogniser takes for real: stopping it is a matter of odds, not a rule. On this module of four one-line
tests the recogniser wins 25 % of canary plantings and 4 % with the differential check's twins too
(simulated over 300 plantings each), so here it is only shown to fool SWE-bench's grading; where it must
resolve none is tests/harness/test_audit.py, on rows where it wins none of 100 plantings
(bench/canary_recogniser.py --instance-ids ... --trials 100)."""


@dataclass
class Grader:
    backend: Backend
    plan: Plan
    image: str
    repo_bytes: int

    async def grade(self, patch: str, policy: Policy, canaries: bool) -> InstanceReport:
        """Graded with canaries or without, and no other check of the run (the differential one is off):
        SWE-bench's grading, or canaries alone."""
        limits = sandbox_limits(1.0, 1024, 256, 512, self.repo_bytes, 60)
        att = await run_attempt(
            self.backend, self.image, limits, self.plan, patch, policy, 60, canaries=canaries,
            differential=False,
        )
        assert att.result == "graded", (att.result, att.message, att.steps)
        inst = self.plan.instance
        return await asyncio.to_thread(
            grade, inst, att.test_log, model_patch=patch, findings=att.findings,
            log_parser=self.plan.log_parser, eval_type=self.plan.eval_type, canaries=att.canaries,
        )


@pytest.fixture(scope="module")
def grader(toy: tuple[Path, str, Path]) -> Iterator[Grader]:
    source, base, specs = toy
    plan = SpecCatalog([specs]).plan(instance_from_row(row(f"{KEY}-forgery", base)))
    image = asyncio.run(ImageBuilder(source).instance(plan))
    backend = get_backend("docker")
    try:
        yield Grader(backend, plan, image.tag, image.repo_bytes)
    finally:
        asyncio.run(backend.aclose())


def _patches(toy: tuple[Path, str, Path], forgery_class: int) -> dict[str, str]:
    source, base, _ = toy
    suite = [*exploits_for(TARGET), *grader_aware(TARGET)]
    chosen: list[Exploit] = [e for e in suite if e.forgery_class == forgery_class]
    assert chosen, f"the suite has no class {forgery_class} exploit for pytest"
    return {e.name: render_patch(source / KEY, base, e) for e in chosen}


async def _grade_all(grader: Grader, patches: dict[str, str], policy: Policy, canaries: bool
                     ) -> dict[str, InstanceReport]:
    sem = asyncio.Semaphore(3)

    async def one(patch: str) -> InstanceReport:
        async with sem:
            return await grader.grade(patch, policy, canaries)

    reports = await asyncio.gather(*(one(p) for p in patches.values()))
    return dict(zip(patches, reports, strict=True))


@pytest.mark.parametrize("forgery_class", CLASSES)
def test_no_forgery_of_the_class_resolves(
    grader: Grader, toy: tuple[Path, str, Path], forgery_class: int
) -> None:
    patches = _patches(toy, forgery_class)
    naive = asyncio.run(_grade_all(grader, patches, Policy.OFF, canaries=False))
    working = sorted(name for name, r in naive.items() if r.resolved)
    assert working, f"no class {forgery_class} forgery fools SWE-bench's grading: the suite lost its teeth"
    ours = asyncio.run(_grade_all(grader, patches, Policy.REVERT, canaries=True))
    resolved = {name: [f.describe() for f in r.findings] for name, r in ours.items() if r.resolved}
    assert not resolved, f"forgeries graded resolved: {resolved}"
    for name in working:
        assert ours[name].findings, f"{name} was stopped without a rule naming why"


def test_the_grader_aware_forgery_fools_swebench_grading(grader: Grader, toy: tuple[Path, str, Path]) -> None:
    """Class 5 forges what SWE-bench's grading takes for a fix (its recogniser calls the new tests real)."""
    patches = _patches(toy, GRADER_AWARE_CLASS)
    naive = asyncio.run(_grade_all(grader, patches, Policy.OFF, canaries=False))
    assert all(r.resolved for r in naive.values()), naive


def test_gold_still_resolves_with_canaries_and_rules(grader: Grader) -> None:
    report = asyncio.run(grader.grade(PATCHES["gold"], Policy.REVERT, canaries=True))
    assert report.resolved and not report.findings
