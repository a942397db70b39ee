"""``envfarm demo``: the whole mission in a few minutes, one part after the other, each a table.

    result = asyncio.run(run_demo(DemoConfig(out=Path("out/demo")), progress))
    for part in result.parts: ...        # PartResult: title, columns, rows, ok, seconds, notes, error

1. farm (farm.py): the rollout farm plays the four tool-use envs with the oracle policy, many episodes in
   flight in warm sandboxes.
2. containment (farm.py): a fork bomb, a memory hog and a runaway are capped; the sandbox survives.
3. harness (harness.py): on one row in the SWE-bench schema the gold patch resolves and forged patches are
   caught, each with the rule that caught it (the row is a bundled one unless a SWE-bench file and its
   repository mirrors are given; the part says which).
4. repair (repair.py): one ``envfarm/CodeRepair-v0`` episode on that row, oracle policy, with its verdict.
5. training (training.py): SFT then a handful of GRPO updates of a tiny model on ToolCalc; the reward curve
   is written as a PNG.
6. next (here): where the files are and which commands go further (the dashboard first).

Each demo run writes a fresh folder ``<out>/<UTC time>/`` (farm run folders refuse to be reused). A part that
raises becomes a :class:`PartResult` with one error row and the rest still run; ``DemoResult.ok`` is False
then, or when a part did not show what it should.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from envfarm.errors import ConfigError

from .result import DemoConfig, PartResult, Progress, no_progress

log = logging.getLogger(__name__)

PARTS = ("farm", "containment", "harness", "repair", "training")
TITLES = {
    "farm": "1. rollout farm",
    "containment": "2. hostile commands",
    "harness": "3. harness verdicts",
    "repair": "4. envfarm/CodeRepair-v0 episode",
    "training": "5. training",
}
PartFn = Callable[[DemoConfig, Path, Progress], Awaitable[PartResult]]


@dataclass(frozen=True)
class DemoResult:
    """Every part's result, the run folder and the wall time."""

    folder: Path
    parts: tuple[PartResult, ...]
    seconds: float

    @property
    def ok(self) -> bool:
        return all(p.ok for p in self.parts)


def _part(name: str) -> PartFn:
    """The coroutine function of a part (imported on use: the training part pulls in torch)."""
    if name == "farm":
        from .farm import farm_part

        return farm_part
    if name == "containment":
        from .farm import containment_part

        return lambda config, out, progress: containment_part(config, progress)
    if name == "harness":
        from .harness import harness_part

        return lambda config, out, progress: harness_part(config, out / "harness", progress)
    if name == "repair":
        from .repair import repair_part

        return repair_part
    from .training import training_part

    return training_part


def check(config: DemoConfig) -> DemoConfig:
    """``config`` with its stamp set; ConfigError for an unknown part or an unusable option."""
    unknown = [p for p in config.parts if p not in PARTS]
    if unknown:
        raise ConfigError(f"unknown demo part {', '.join(unknown)}: choose from {', '.join(PARTS)}")
    if config.episodes < 1 or config.concurrency < 1 or config.rl_updates < 1 or config.sft_steps < 0:
        raise ConfigError("episodes, concurrency and rl_updates must be at least 1, sft_steps at least 0")
    if config.instances is not None and config.repo_source is None:
        raise ConfigError("--instances needs --repo-source (a folder of owner__name git mirrors, or a git "
                          "URL prefix): a SWE-bench row is graded on its repository at the base commit")
    policy = config.train_checkpoint
    if "training" in config.parts and policy is not None and not (policy / "spec.json").is_file():
        raise ConfigError(f"--train-checkpoint {policy} is not a policy folder (no spec.json): give "
                          "checkpoints/sft/policy of an `envfarm train` run, or leave it out for the bundled "
                          "one")
    stamp = config.stamp or datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return replace(config, stamp=stamp)


async def run_part(name: str, config: DemoConfig, folder: Path, progress: Progress) -> PartResult:
    """One part; an exception becomes an error row (logged with its traceback), never a crash."""
    start = time.monotonic()
    try:
        return await _part(name)(config, folder, progress)
    except Exception as e:  # a broken part is reported, and the demo goes on
        log.info("demo part %s failed", name, exc_info=True)
        failed = PartResult.failed(name, TITLES[name], e, time.monotonic() - start)
        hint = f"`envfarm -v demo --part {name}` logs the traceback"
        return replace(failed, notes=(*failed.notes, hint))


async def run_demo(config: DemoConfig, progress: Progress = no_progress) -> DemoResult:
    """Run the configured parts in order into ``<out>/<stamp>/``."""
    config = check(config)
    start = time.monotonic()
    folder = config.out / config.stamp
    folder.mkdir(parents=True, exist_ok=True)
    parts = [await run_part(name, config, folder, progress) for name in config.parts]
    return DemoResult(folder, tuple(parts), time.monotonic() - start)


def next_steps(result: DemoResult) -> PartResult:
    """Part 6: where to look next, as commands to paste."""
    f = result.folder
    rows = (
        ("browse every run of this demo", f"envfarm dashboard --run {f}"),
        ("farm more episodes", "envfarm farm run --env envfarm/ToolCalc-v0 --policy oracle --episodes 1000"),
        ("grade predictions", "envfarm harness run --instances FILE --predictions gold --run-id r1 "
                              "--repo-source MIRRORS"),
        ("the full training run", "envfarm train --env envfarm/ToolCalc-v0 --out runs/train"),
        ("everything at once", "envfarm --help"),
    )
    notes = (f"output folder: {f}/ (farm-<env>/, harness/, coderepair/, train/)",
             f"wall time: {result.seconds:.0f} s")
    return PartResult("next", "6. where to look next", ("to", "run"), rows, True, 0.0, notes)


__all__ = ["PARTS", "DemoConfig", "DemoResult", "PartResult", "Progress", "next_steps", "run_demo"]
