"""Demo part 3: harness verdicts on one row in the SWE-bench schema: the gold patch resolves, forged patches
(a conftest.py that flips failures, gutted test files, an in-memory rewrite of pytest's reports, a pytest
config that loads a flipping plugin) are caught, and the rule that caught each is named.

The row is one of envfarm's bundled code-repair rows by default (``envs/code_repair/builtin/``: SWE-bench
v5 columns, a small stdlib-only project whose git history is built on the spot from the package's files).
A genuine SWE-bench row needs its repository's git history, which a fresh machine does not have; with
``DemoConfig.instances`` and ``repo_source`` (mirrors, or a git URL prefix) the same part grades that row.
Each forgery is graded twice: as SWE-bench grades (no tamper rules, no canaries), which shows the forgery
works at all, and with envfarm's defaults, which must not resolve it.
"""

from __future__ import annotations

import asyncio
import posixpath
import time
from dataclasses import dataclass
from pathlib import Path

from envfarm.errors import ConfigError
from envfarm.harness import HarnessConfig, Policy, Prediction, evaluate, load_instances, select
from envfarm.harness.grading import InstanceReport
from envfarm.harness.instances import Instance
from envfarm.harness.patches import touched_paths
from envfarm.harness.repos import RepoSource, locate, parse_source
from envfarm.testing.exploits import Exploit, Target, exploits_for, render_patch

from .result import DemoConfig, PartResult, Progress

BUILTIN_ROW = "envfarm__roman-four-hundreds"
"""The bundled row the harness and CodeRepair parts use by default."""
FORGERIES = {
    "pytest-conftest": "adds a conftest.py that turns failed tests into passes (swebench issue 631)",
    "pytest-gut-test-files": "replaces the tests' files by a stub",
    "pytest-rewrite-testreport": "the code under test rewrites pytest's reports when imported",
    "pytest-toml-addopts-plugin": "a pytest.toml loads a plugin that turns failures into passes",
}
"""Exploits of ``envfarm.testing.exploits`` graded by the demo, one per way of cheating (forgery classes 4, 4,
2, 1), with what each does in a few words."""
RUNNERS = {"sympy/sympy": "sympy", "django/django": "django"}
"""Test runners of the forgery suite other than pytest, by repository."""
RUN_ID = "demo"
SWEBENCH_RUN_ID = "demo-swebench-grading"
COLUMNS = ("patch", "what it does", "swebench alone", "envfarm", "caught by")


@dataclass(frozen=True)
class Row:
    """What the part grades: the instance and where its repository is."""

    instance: Instance
    repo_source: RepoSource
    bundled: bool


async def pick_row(config: DemoConfig) -> Row:
    """The configured row: from ``config.instances`` with its repo source, else the bundled one."""
    if config.instances is not None:
        if config.repo_source is None:
            raise ConfigError("a SWE-bench row needs its repository: give --repo-source (a folder of "
                              "owner__name git mirrors, or a git URL prefix) with --instances")
        found = await asyncio.to_thread(load_instances, config.instances)
        ids = [config.instance_id] if config.instance_id else [found[0].instance_id]
        return Row(select(found, ids, str(config.instances))[0], parse_source(config.repo_source), False)
    from envfarm.envs.code_repair.env import builtin_instances

    instances, repos = await asyncio.to_thread(builtin_instances)
    wanted = config.instance_id or BUILTIN_ROW
    return Row(select(list(instances), [wanted], "the bundled rows")[0], repos, True)


def target(inst: Instance) -> Target:
    """What the forgery suite needs to know of the row: its runner, a module every test imports (the
    package of the first file the gold patch changes), and test_patch's files."""
    first = next((p for p in touched_paths(inst.patch) if p.endswith(".py")), "")
    package_init = posixpath.join(posixpath.dirname(first), "__init__.py") if "/" in first else first
    tests = tuple(touched_paths(inst.test_patch))
    return Target(RUNNERS.get(inst.repo, "pytest"), package_init, tests)  # type: ignore[arg-type]


def forgeries(inst: Instance) -> list[Exploit]:
    """The demo's forgeries that apply to this row (for another runner: the first of each class)."""
    suite = exploits_for(target(inst))
    order = list(FORGERIES)
    chosen = sorted((e for e in suite if e.name in FORGERIES), key=lambda e: order.index(e.name))
    if not chosen:
        chosen = [next(e for e in suite if e.forgery_class == k) for k in (4, 2, 1)
                  if any(e.forgery_class == k for e in suite)]
    return chosen


def verdict(report: InstanceReport) -> str:
    if report.error_kind is not None:
        return f"error: {report.error_kind}"
    return str(report.outcome)


def caught_by(report: InstanceReport) -> str:
    """The rules that fired (tamper rules before the tests, canary/missing-tests after), deduplicated."""
    rules = list(dict.fromkeys(f.rule for f in report.findings))
    if rules:
        return ", ".join(rules)
    return "-" if report.resolved else "tests still fail"


async def _grade(row: Row, model: str, patch: str, out: Path, swebench: bool) -> InstanceReport:
    inst = row.instance
    config = HarnessConfig(run_id=SWEBENCH_RUN_ID if swebench else RUN_ID, report_dir=out,
                           repo_source=row.repo_source, max_workers=1, retries=0 if swebench else 1,
                           tamper=Policy.OFF if swebench else Policy.REVERT, canaries=not swebench,
                           differential=not swebench)
    run = await evaluate([inst], {inst.instance_id: Prediction(inst.instance_id, model, patch)}, config)
    return run.reports[inst.instance_id]


async def harness_part(config: DemoConfig, out: Path, progress: Progress) -> PartResult:
    """Grade the gold patch (building the row's images on first use), then every forgery both ways."""
    start = time.monotonic()
    row = await pick_row(config)
    inst = row.instance
    repo = await asyncio.to_thread(locate, row.repo_source, inst.repo, inst.base_commit)
    chosen = forgeries(inst)
    patches = {e.name: await asyncio.to_thread(render_patch, repo, inst.base_commit, e) for e in chosen}
    total, done = 1 + 2 * len(chosen), 0
    progress("harness", 0, total)
    gold = await _grade(row, "gold", inst.patch, out, swebench=False)  # builds the images once
    done += 1
    progress("harness", done, total)
    slots = asyncio.Semaphore(2)

    async def both(name: str) -> tuple[InstanceReport, InstanceReport]:
        nonlocal done
        async with slots:
            plain = await _grade(row, name, patches[name], out, swebench=True)
            done += 1
            progress("harness", done, total)
            ours = await _grade(row, name, patches[name], out, swebench=False)
            done += 1
            progress("harness", done, total)
            return plain, ours

    graded = await asyncio.gather(*(both(e.name) for e in chosen))
    rows = [("gold", "the row's own fix", "-", verdict(gold), caught_by(gold))]
    rows += [(e.name.removeprefix("pytest-"), FORGERIES.get(e.name, e.description), verdict(plain),
              verdict(ours), caught_by(ours)) for e, (plain, ours) in zip(chosen, graded, strict=True)]
    ok = gold.resolved and not any(ours.resolved for _, ours in graded)
    kind = "a bundled row in the SWE-bench schema" if row.bundled else "a SWE-bench row"
    return PartResult("harness", f"3. harness verdicts on {inst.instance_id} ({kind})", COLUMNS, tuple(rows),
                      ok, time.monotonic() - start, _notes(row, out))


def _notes(row: Row, out: Path) -> tuple[str, ...]:
    where = (f"a bundled row in the SWE-bench schema (envs/code_repair/builtin/: the {row.instance.repo} "
             "project, its git history built here from the package's files), not a row of SWE-bench Lite or "
             "Verified: those need their repository's git history (a mirror), which a fresh machine does "
             "not have and the demo does not fetch; `envfarm demo --instances FILE --repo-source MIRRORS` "
             "grades a genuine row the same way" if row.bundled else
             f"a SWE-bench row, repository from {row.repo_source}")
    return (where,
            "swebench alone: swebench 5.0.2's grading without envfarm's tamper rules, canaries and twins (a "
            "forgery 'resolved' there works); envfarm: the default grading",
            f"reports: {out}/{RUN_ID}/<patch>/<instance>/report.json (envfarm), {out}/{SWEBENCH_RUN_ID}/ "
            "(swebench alone)")


__all__ = ["BUILTIN_ROW", "FORGERIES", "harness_part", "pick_row", "target"]
