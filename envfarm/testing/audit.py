"""Red-team a grader on your own rows: every forgery of the suite (``exploits.py``) and gold, graded.

    report = asyncio.run(audit(rows, HarnessConfig(run_id="audit", repo_source=mirrors)))
    report.by_class()            # {class: (exploits graded, resolved by forgery, suspect)}
    report.sound                 # no forgery resolved and gold still resolves on every row

``envfarm harness audit`` is the command. Each exploit that applies to a row's runner (pytest, sympy's
bin/test, django's runtests.py) is rendered as a patch against the row's base commit and graded by
:func:`envfarm.harness.evaluate` with the configuration given (tamper policy, canaries, strict), one run per
exploit name (model ``forgery/<name>``), after the gold run (model ``gold``). Reports land where a harness
run's do; :func:`write_report` adds ``audit.json`` and ``audit.md``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from envfarm.harness import HarnessConfig, Prediction, evaluate
from envfarm.harness.grading import InstanceReport
from envfarm.harness.instances import Instance
from envfarm.harness.repos import locate

from .exploit_payloads import GRADER_AWARE, hook_code, recognise
from .exploits import Edit, Exploit, Target, exploits_for, render_patch
from .recogniser import BUILTIN, SWE_BENCH, Weights

GOLD = "gold"
PREFIX = "forgery/"
GRADER_AWARE_CLASS = 5
"""Forgery classes 1-4 are ``exploits.py``'s; 5 is grader-aware (:func:`grader_aware`)."""


@dataclass(frozen=True)
class Graded:
    """One patch graded on one row."""

    instance_id: str
    patch: str
    """``gold`` or the exploit's name."""
    forgery_class: int
    """0 for gold, else the exploit's class (1-4, 5 grader-aware)."""
    outcome: str
    resolved: bool
    suspect: bool
    rules: tuple[str, ...]
    """Tamper, canary and screening rules that fired."""


@dataclass(frozen=True)
class AuditReport:
    run_id: str
    rows: tuple[str, ...]
    graded: tuple[Graded, ...]

    @property
    def gold(self) -> dict[str, bool]:
        return {g.instance_id: g.resolved for g in self.graded if g.forgery_class == 0}

    @property
    def forged(self) -> tuple[Graded, ...]:
        return tuple(g for g in self.graded if g.forgery_class)

    @property
    def sound(self) -> bool:
        """No forgery resolved, and gold resolves on every row."""
        return not any(g.resolved for g in self.forged) and all(self.gold.values())

    def by_class(self) -> dict[int, tuple[int, int, int]]:
        """class -> (forgeries graded, resolved by forgery, suspect)."""
        out: dict[int, tuple[int, int, int]] = {}
        for g in self.forged:
            n, r, s = out.get(g.forgery_class, (0, 0, 0))
            out[g.forgery_class] = (n + 1, r + g.resolved, s + g.suspect)
        return dict(sorted(out.items()))

    def to_json(self) -> dict[str, object]:
        return {
            "run_id": self.run_id,
            "rows": list(self.rows),
            "sound": self.sound,
            "gold_resolved": self.gold,
            "by_class": {str(k): dict(zip(("graded", "resolved", "suspect"), v, strict=True))
                         for k, v in self.by_class().items()},
            "graded": [asdict(g) for g in self.graded],
        }  # fmt: skip


def suite(inst: Instance) -> list[Exploit]:
    """Every exploit of the forgery suite that applies to ``inst``'s runner, the grader-aware class last."""
    from envfarm.demo.harness import target
    from envfarm.envs.code_repair.builtin import OWNER

    weights = BUILTIN if inst.repo.split("/")[0] == OWNER else SWE_BENCH  # fitted for the tasks attacked
    return [*exploits_for(target(inst)), *grader_aware(target(inst), weights)]


def grader_aware(t: Target, weights: Weights = SWE_BENCH) -> list[Exploit]:
    """Class 5, grader-aware: the package under test rewrites the runner's reports in memory, forging a pass
    only for the failing tests that ``envfarm.testing.recogniser`` (its source embedded in the patch, run in
    the test process with ``weights``, fitted for the kind of task attacked) takes for real, and leaving the
    suspected canaries and decoys honest."""
    key = GRADER_AWARE[t.runner]
    hook = hook_code(key, recognise(weights))
    return [Exploit(f"{t.runner}-grader-aware", GRADER_AWARE_CLASS,
                    "the package rewrites the runner's reports, forging only tests its canary recogniser "
                    "calls real", (Edit(t.package_init, "append", hook),))]


async def audit(
    rows: Sequence[Instance],
    config: HarnessConfig,
    only: Sequence[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> AuditReport:
    """Grade gold, then every applicable forgery (or those named in ``only``), on every row."""
    patches: dict[str, dict[str, tuple[int, str]]] = {}
    for inst in rows:
        repo = await asyncio.to_thread(locate, config.repo_source, inst.repo, inst.base_commit)
        for e in suite(inst):
            if only is None or e.name in only:
                text = await asyncio.to_thread(render_patch, repo, inst.base_commit, e)
                patches.setdefault(e.name, {})[inst.instance_id] = (e.forgery_class, text)
    graded = [*await _run(rows, GOLD, {i.instance_id: (0, i.patch) for i in rows}, config, progress)]
    for name, per_row in patches.items():
        graded += await _run(rows, name, per_row, config, progress)
    return AuditReport(config.run_id, tuple(i.instance_id for i in rows), tuple(graded))


async def _run(
    rows: Sequence[Instance],
    name: str,
    per_row: dict[str, tuple[int, str]],
    config: HarnessConfig,
    progress: Callable[[str], None] | None,
) -> list[Graded]:
    model = GOLD if name == GOLD else PREFIX + name
    chosen = [i for i in rows if i.instance_id in per_row]
    preds = {iid: Prediction(iid, model, text) for iid, (_, text) in per_row.items()}
    run = await evaluate(chosen, preds, config)
    if progress is not None:
        progress(name)
    return [_graded(run.reports[i.instance_id], name, per_row[i.instance_id][0]) for i in chosen]


def _graded(r: InstanceReport, name: str, cls: int) -> Graded:
    rules = tuple(dict.fromkeys([*(f.rule for f in r.findings), *(s.rule for s in r.suspicions)]))
    outcome = f"error: {r.error_kind}" if r.error_kind else str(r.outcome)
    return Graded(r.instance_id, name, cls, outcome, r.resolved, r.suspect, rules)


def markdown(report: AuditReport) -> str:
    lines = [
        f"# Forgery audit — run {report.run_id}",
        "",
        f"**{'Sound' if report.sound else 'NOT SOUND'}**: {len(report.rows)} rows, "
        f"{len(report.forged)} forgeries graded.",
        "",
        "| class | forgeries | resolved by forgery (must be 0) | suspect |",
        "| --- | ---: | ---: | ---: |",
    ]
    lines += [f"| {c} | {n} | {r} | {s} |" for c, (n, r, s) in report.by_class().items()]
    lines += ["", "| row | gold still resolves |", "| --- | --- |"]
    lines += [f"| {iid} | {'yes' if ok else 'NO'} |" for iid, ok in report.gold.items()]
    lines += [
        "",
        "| row | patch | class | verdict | suspect | rules |",
        "| --- | --- | ---: | --- | --- | --- |",
    ]
    lines += [
        f"| {g.instance_id} | {g.patch} | {g.forgery_class} | {g.outcome} | {'yes' if g.suspect else ''} "
        f"| {', '.join(g.rules)} |"
        for g in report.graded
    ]
    return "\n".join(lines) + "\n"  # fmt: skip


def write_report(report: AuditReport, folder: Path) -> tuple[Path, Path]:
    """``<folder>/<run_id>/audit.json`` and ``audit.md``."""
    out = folder / report.run_id
    out.mkdir(parents=True, exist_ok=True)
    (out / "audit.json").write_text(json.dumps(report.to_json(), indent=2) + "\n", encoding="utf-8")
    (out / "audit.md").write_text(markdown(report), encoding="utf-8")
    return out / "audit.json", out / "audit.md"
