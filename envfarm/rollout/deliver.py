"""Deliver what a stopped run left in its spool: ``envfarm farm deliver RUN``.

    counts = await deliver_run(Path("runs/a"))                      # the sinks the run was started with
    counts = await deliver_run(Path("runs/a"), sinks=[HTTPSink(url)])  # or others, by name
    counts["learner"].backlog                                       # 0 once everything arrived

A run that stopped while a sink was down (the learner past its timeout, a sink with a bug) keeps that sink's
share in RUN/spool.jsonl, behind the sink's cursor. This feeds each sink from its cursor until it holds
everything, as the run itself would have; the cursors move as sinks acknowledge, so delivering twice sends
nothing twice (receivers dedup on ``episode_id`` either way). No episode runs and no sandbox starts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envfarm.errors import ConfigError

from .runs import RunDir
from .sinks import Delivery, FileSink, HTTPSink, Sink, finish_feeding
from .spool import Spool

LEARNER_BACKLOG = 256
"""The learner sink's default ``max_backlog`` (``--learner-backlog``)."""


@dataclass(frozen=True)
class DeliveryCount:
    """One sink after :func:`deliver_run`."""

    delivered: int
    """Trajectories it has acknowledged, in all (this call and the run before it)."""
    backlog: int
    """Trajectories in the spool it has still not acknowledged (0: it has everything)."""
    last_error: str | None
    """The last delivery failure, when it still had a backlog."""


def sink_options(sinks: Sequence[Sink]) -> dict[str, str]:
    """What :func:`run_sinks` needs to make ``sinks`` again (``out``, ``learner``); other sinks have no such
    description and are given to :func:`deliver_run` by the caller."""
    options = {}
    for sink in sinks:
        if isinstance(sink, FileSink):
            options["out"] = str(sink.path)
        elif isinstance(sink, HTTPSink):
            options["learner"] = sink.url
    return options


def run_sinks(options: Mapping[str, Any], learner_backlog: int = LEARNER_BACKLOG) -> list[Sink]:
    """The sinks named by a run's options (``out``: a JSONL file, ``learner``: a URL), as run.json holds
    them."""
    sinks: list[Sink] = []
    if options.get("out"):
        sinks.append(FileSink(Path(options["out"])))
    if options.get("learner"):
        sinks.append(HTTPSink(str(options["learner"]), max_backlog=learner_backlog))
    return sinks


async def deliver_run(path: Path, sinks: Sequence[Sink] | None = None,
                      timeout_s: float = 60.0) -> dict[str, DeliveryCount]:
    """Feed ``sinks`` (default: the run's own) from run folder ``path``'s spool, each from its cursor, for at
    most ``timeout_s``; return where each stands. A sink that is still down keeps its backlog."""
    run = await RunDir.load(path)
    chosen = list(run_sinks(run.spec.options) if sinks is None else sinks)
    if not chosen:
        raise ConfigError(f"{path}: the run names no sink to deliver to (it was started without --out and "
                          "--learner); pass the sinks to deliver_run")
    spool = Spool(run.spool_path)
    await spool.open()
    try:
        deliveries = [Delivery(spool, sink, run.cursor_dir) for sink in chosen]
        try:
            for d in deliveries:
                await d.open()
            await _feed(deliveries, timeout_s)
        finally:
            for sink in chosen:
                await sink.aclose()
    finally:
        await spool.aclose()
    return {d.sink.name: DeliveryCount(d.cursor.count, d.backlog, d.last_error if d.backlog else None)
            for d in deliveries}


async def _feed(deliveries: list[Delivery], timeout_s: float) -> None:
    draining = asyncio.Event()
    draining.set()  # nothing is appended: each feeder ends once its sink holds the whole spool
    await finish_feeding([asyncio.create_task(d.run(draining), name=f"sink {d.sink.name}")
                          for d in deliveries], timeout_s)


__all__ = ["DeliveryCount", "deliver_run", "run_sinks", "sink_options"]
