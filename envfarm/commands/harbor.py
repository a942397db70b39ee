"""``envfarm harbor``: Harbor task directories (``task.toml``, ``instruction.md``, ``environment/Dockerfile``,
``tests/test.sh``, ``solution/solve.sh``) checked here, offline.

    envfarm harbor validate --tasks DIR --report-dir R [--task-ids A B] [--run-id ID] [--max-workers N]
                            [--repeat K] [--backend bwrap|docker] [--prune-images]

The tasks themselves run as an env: ``gymnasium.make("envfarm/Harbor-v0", tasks=DIR)`` (``envfarm farm run
--env envfarm/Harbor-v0 --env-kwargs '{"tasks": "DIR"}'``, ``eval``, ``train``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from envfarm.sandbox.values import DEFAULT_BACKEND

app = typer.Typer(help="Harbor task directories: validate them here (build offline, oracle, no-op agent).",
                  no_args_is_help=True)
console = Console()
err = Console(stderr=True)


TasksOpt = Annotated[Path, typer.Option(
    "--tasks", help="A folder of Harbor task directories, or one task directory.")]
TaskIdsOpt = Annotated[list[str] | None, typer.Option(
    "--task-ids", help="Task directory names to validate (repeat, or space-separated); default: all.")]
RunIdOpt = Annotated[str, typer.Option("--run-id", help="Run id; the same id resumes a run.")]
WorkersOpt = Annotated[int, typer.Option("--max-workers", min=1, help="Tasks built and run at once.")]
RepeatOpt = Annotated[int, typer.Option("--repeat", min=1, help="Oracle runs per task (flakiness).")]
BackendOpt = Annotated[str, typer.Option("--backend", help="Sandbox backend: bwrap or docker.")]
PruneOpt = Annotated[bool, typer.Option(
    "--prune-images", help="Remove what each task built once no task left in the run needs it (thousands "
    "of tasks on a small disk); tasks then run grouped by their apt packages.")]


@app.command("validate")
def validate_cmd(
    tasks: TasksOpt,
    report_dir: Annotated[Path, typer.Option("--report-dir", help="Folder the reports go to.")],
    task_ids: TaskIdsOpt = None,
    run_id: RunIdOpt = "validate",
    max_workers: WorkersOpt = 2,
    repeat: RepeatOpt = 1,
    backend: BackendOpt = DEFAULT_BACKEND,
    prune_images: PruneOpt = False,
) -> None:
    """Per task: build its image offline, run its oracle (solution/solve.sh) and a no-op agent; write
    validate.json and validate.md with a reason for every task that does not validate."""
    from envfarm.envs.harbor.task import select_dirs
    from envfarm.envs.harbor.validate import Event, ValidateConfig, num, validate_tasks

    ids = tuple(i for given in task_ids or () for i in given.split())
    total = len(select_dirs(tasks, list(ids) or None))  # unknown ids fail here, before any build
    config = ValidateConfig(tasks=tasks, report_dir=report_dir, task_ids=ids, run_id=run_id,
                            max_workers=max_workers, repeat=repeat, backend=backend,
                            prune_images=prune_images)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err, disable=not err.is_terminal) as bar:
        job = bar.add_task("validating", total=total)

        def on_event(event: Event) -> None:
            if event.stage != "done" or event.row is None:
                bar.update(job, description=f"{event.task[:40]}: {event.stage}")
                return
            bar.advance(job)
            if not err.is_terminal:
                row = event.row
                err.print(f"{event.task}: {row.reason or 'ok'} ({row.seconds:.0f} s)", highlight=False)

        result = asyncio.run(validate_tasks(config, on_event))
    table = Table("task", "built", "oracle", "no-op", "reason", "s")
    for r in result.rows:
        table.add_row(r.task, "yes" if r.built else "no", num(r.oracle_reward), num(r.noop_reward),
                      r.reason or "ok", f"{r.seconds:.1f}")
    console.print(table)
    reasons = ", ".join(f"{k} {v}" for k, v in result.reasons.most_common()) or "none"
    done = sum(r.validated for r in result.rows)
    console.print(f"validated {done}/{len(result.rows)}; reasons: {reasons}\n{result.json_path}\n"
                  f"{result.markdown_path}", highlight=False)

