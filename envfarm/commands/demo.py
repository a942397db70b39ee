"""``envfarm demo``: the job `make demo` runs; the parts are library code (``envfarm/demo/``).

1. The rollout farm plays each built-in tool-use env (ToolCalc, SqlQuery, FileOps, OrderDesk) with the
   oracle policy, many episodes in flight in warm sandboxes.
2. Hostile commands (a fork bomb, a memory hog, a runaway) are contained without harming the sandbox.
3. The harness grades one row in the SWE-bench schema: the gold patch resolves, forged patches are caught
   and the rule that caught each is named.
4. One envfarm/CodeRepair-v0 episode, oracle policy, with its verdict.
5. The trainer: a few GRPO updates of a tiny model on ToolCalc from the bundled SFT policy; the reward
   curve as a PNG.
6. Where to look next.

One table per part. A part that fails prints an error row and the rest still run; the exit code is 1 when
any part failed or did not show what it should.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import TaskID
from rich.table import Table

from envfarm.demo import PARTS, DemoConfig, DemoResult, PartResult, next_steps, run_demo
from envfarm.demo.result import BUNDLED_POLICY
from envfarm.sandbox.values import DEFAULT_BACKEND

from .options import progress_bar

console = Console()
D = DemoConfig()  # the defaults
CHATTY = ("envfarm.trainer.rl", "envfarm.rollout.farm", "envfarm.rollout.episode")
"""Loggers whose messages the demo's tables already say (an update without an optimizer step, a farm
stopping with episodes in flight when the trainer has enough, an episode that failed, with its traceback):
quiet unless -v."""


def table(part: PartResult) -> Table:
    status = "" if part.ok else " [red](FAILED)[/red]"
    out = Table(title=f"{escape(part.title)}{status}", title_justify="left", expand=False)
    for col in part.columns:
        out.add_column(col, overflow="fold")
    for row in part.rows:
        out.add_row(*(escape(cell) for cell in row), style="red" if part.error else None)
    lines = [escape(n) for n in part.notes]
    if part.seconds:
        lines.append(f"{part.seconds:.1f} s")
    out.caption = "\n".join(lines) or None
    out.caption_justify = "left"
    return out


def _run(config: DemoConfig) -> DemoResult:
    tasks: dict[str, TaskID] = {}
    if logging.getLogger().getEffectiveLevel() >= logging.WARNING:
        for name in CHATTY:
            logging.getLogger(name).setLevel(logging.CRITICAL)
    with progress_bar(console, transient=True) as bar:

        def progress(label: str, done: int, total: int) -> None:
            key = label.split(":")[0]
            if key not in tasks:
                tasks[key] = bar.add_task(label, total=total)
            bar.update(tasks[key], description=label, completed=done, total=total)

        return asyncio.run(run_demo(config, progress))


def demo(
    backend: Annotated[str, typer.Option(help="Sandbox backend of the farm, containment and training: "
                                              "bwrap or docker.")] = DEFAULT_BACKEND,
    episodes: Annotated[int, typer.Option(min=1, help="Oracle episodes per tool-use env.")] = D.episodes,
    concurrency: Annotated[int, typer.Option(min=1, help="Episodes in flight at once.")] = D.concurrency,
    out: Annotated[Path, typer.Option(help="Parent of the run folder (each run writes <out>/<UTC time>/).")
                   ] = D.out,
    part: Annotated[list[str] | None, typer.Option(
        "--part", help=f"Run only these parts (repeat): {', '.join(PARTS)}. Default: all.")] = None,
    instances: Annotated[Path | None, typer.Option(
        help="A SWE-bench file (JSON, JSONL, parquet) for the harness and CodeRepair parts, instead of the "
             "bundled rows; needs --repo-source.")] = None,
    instance_id: Annotated[str | None, typer.Option(
        help="The row to grade (default: a bundled row, or the first of --instances).")] = None,
    repo_source: Annotated[str | None, typer.Option(
        help="Folder of owner__name git mirrors, or a git URL prefix, for --instances rows.")] = None,
    rl_updates: Annotated[int, typer.Option(min=1, help="GRPO updates of the training part.")] = D.rl_updates,
    sft_steps: Annotated[int, typer.Option(
        min=0, help="SFT steps before them, with --train-from-scratch.")] = D.sft_steps,
    train_checkpoint: Annotated[Path | None, typer.Option(
        help="Policy folder to start the training part's RL from (default: the bundled SFT policy; e.g. "
             "runs/train/checkpoints/sft/policy of a full `envfarm train` run).")] = None,
    train_from_scratch: Annotated[bool, typer.Option(
        help="Start the training part from a random init with a short SFT warm start (--sft-steps) "
             "instead; its rewards are 0, so GRPO takes no optimizer step.")] = False,
) -> None:
    """The whole mission in a few minutes: farm, containment, harness verdicts, a CodeRepair episode, a few
    RL updates with their reward curve, and where to look next."""
    config = DemoConfig(out=out, backend=backend, episodes=episodes, concurrency=concurrency,
                        parts=tuple(part or PARTS), instance_id=instance_id, instances=instances,
                        repo_source=repo_source, rl_updates=rl_updates, sft_steps=sft_steps,
                        train_checkpoint=None if train_from_scratch else (train_checkpoint or BUNDLED_POLICY))
    result = _run(config)
    for item in (*result.parts, next_steps(result)):
        console.print(table(item))
        console.print()
    failed = [p.key for p in result.parts if not p.ok]
    if failed:
        console.print(f"[red]parts that did not show what they should: {', '.join(failed)}[/red]")
        raise typer.Exit(1)
    console.print(f"[green]all {len(result.parts)} parts ok in {result.seconds:.0f} s[/green]")
