"""Validation of mined rows by the harness itself: the gold patch resolves, the unfixed code does not.

    verdicts, seconds = await validate(table, work, backend, workers)   # {instance_id: Verdict}

One ``harness validate`` run over the rows (repos and specs from the work folder; its run id is fixed, so
a rerun only evaluates rows it has no report for): gold once (``<run-id>-gold1``) and the unpatched base
with the hidden tests put back (``<run-id>-empty``: what SWE-bench's validation calls the empty patch, the
unfixed code), each a real test run in the row's instance image. A row is kept when gold resolves and the
base does not; any other outcome is the harness's reason (``harness.validate.REASONS``) in the verdict.
The miner's own test runs never decide: they found the bug, the harness confirms it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envfarm.harness import Event, HarnessConfig
from envfarm.harness.instances import instance_from_row
from envfarm.harness.validate import validate as harness_validate
from envfarm.sandbox import Backend

from .state import WorkFolder

RUN_ID = "mine-validate"
CHECKS = "gold+base"
"""What validation runs (part of a catalogue entry's settings: rows validated otherwise are redone)."""


@dataclass(frozen=True)
class Verdict:
    """The harness's verdicts on one row."""

    gold_resolved: bool
    empty_resolved: bool
    reason: str | None = None
    """Why the row does not validate (``harness.validate.REASONS``; also when a run errored)."""
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.gold_resolved and not self.empty_resolved and self.reason is None


async def validate(
    table: Sequence[Mapping[str, Any]],
    work: WorkFolder,
    backend: Backend,
    workers: int,
    on_event: Callable[[Event], None] | None = None,
    run_id: str = RUN_ID,
) -> tuple[dict[str, Verdict], float]:
    """Verdicts per instance id, and the seconds the harness runs took (gold and base)."""
    instances = [instance_from_row(r, str(r["instance_id"])) for r in table]
    if not instances:
        return {}, 0.0
    config = HarnessConfig(run_id=run_id, report_dir=work.harness, repo_source=work.repos,
                           specs=(work.specs,), max_workers=workers, backend=backend.name, timeout_s=600.0)
    t0 = time.monotonic()
    # the caller's backend: one sandbox-name counter per process (two backends would reuse names)
    # no probe run: mined tasks are graded without a decoy pool
    result = await harness_validate(instances, config, progress=on_event, backend=backend, probe=False)
    took = time.monotonic() - t0
    out = {}
    for row in result.rows:
        gold = bool(row.gold) and all(g == "resolved" for g in row.gold)
        out[row.instance_id] = Verdict(gold, row.empty == "resolved", row.reason, row.detail[:500])
    return out, took
