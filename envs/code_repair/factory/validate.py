"""Validation of mined rows by the harness itself: the gold patch resolves, the unfixed code does not.

    verdicts = await validate(table, logs, work, backend, workers)   # {instance_id: Verdict}

Gold: one ``harness.evaluate`` run with ``predictions="gold"`` over every row (repos and specs from the
work folder; its run id is fixed, so a rerun only evaluates rows it has no report for). Empty: an empty
patch is never run by the harness (counted unresolved); the check that matters is that the bug is real,
so the harness's ``grade`` is applied to the kept mutant's own test log (the base commit's code with the
hidden tests): it must not resolve.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envfarm.harness import Event, HarnessConfig, evaluate, grade, load_predictions
from envfarm.harness.instances import instance_from_row
from envfarm.harness.run import compose_log
from envfarm.sandbox import Backend, ExecResult

from .state import WorkFolder

RUN_ID = "mine-validate"


@dataclass(frozen=True)
class Verdict:
    """The harness's verdicts on one row."""

    gold_resolved: bool
    empty_resolved: bool
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.gold_resolved and not self.empty_resolved


async def validate(
    table: Sequence[Mapping[str, Any]],
    logs: Mapping[str, str],
    work: WorkFolder,
    backend: Backend,
    workers: int,
    on_event: Callable[[Event], None] | None = None,
    run_id: str = RUN_ID,
) -> tuple[dict[str, Verdict], float]:
    """Verdicts per instance id, and the seconds the harness run took."""
    instances = [instance_from_row(r, str(r["instance_id"])) for r in table]
    if not instances:
        return {}, 0.0
    config = HarnessConfig(run_id=run_id, report_dir=work.harness, repo_source=work.repos,
                           specs=(work.specs,), max_workers=workers, backend=backend.name, timeout_s=600.0)
    t0 = time.monotonic()
    # the caller's backend: one sandbox-name counter per process (two backends would reuse names)
    run = await evaluate(instances, load_predictions("gold", instances), config, progress=on_event,
                         backend=backend)
    took = time.monotonic() - t0
    out = {}
    for inst in instances:
        report = run.reports.get(inst.instance_id)
        gold = bool(report and report.resolved)
        raw = logs.get(inst.instance_id, "")
        buggy = compose_log(raw, ExecResult(1, "", "", 0.0, False, False), 600.0)[0]
        empty = grade(inst, buggy, model_patch=inst.patch).resolved if raw else True
        why = "" if gold else (report.error or str(report.status) if report else "no report")
        out[inst.instance_id] = Verdict(gold, empty, why)
    return out, took
