"""``envfarm harbor``: Harbor task directories (``task.toml``, ``instruction.md``, ``environment/Dockerfile``,
``tests/test.sh``, ``solution/solve.sh``) checked here, offline.

    envfarm harbor check --tasks DIR [--task-ids A B] [--report FILE] [--json]
    envfarm harbor validate --tasks DIR --report-dir R [--task-ids A B] [--run-id ID] [--max-workers N]
                            [--repeat K] [--backend bwrap|docker] [--prune-images] [--sample N [--seed S]]

``check`` is the static part of ``validate``, in seconds over thousands of tasks: per task, does it load,
does its Dockerfile build offline here (else validate's reason and detail), has it an oracle, does it ask
for internet; nothing is built or run. ``validate`` builds each task's image, runs its oracle and a no-op
agent; ``--sample N`` validates a random N of the tasks (``--seed``: the same seed, the same tasks).

The tasks themselves run as an env: ``gymnasium.make("envfarm/Harbor-v0", tasks=DIR)`` (``envfarm farm run
--env envfarm/Harbor-v0 --env-kwargs '{"tasks": "DIR"}'``, ``eval``, ``train``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from envfarm.sandbox.values import DEFAULT_BACKEND

from .options import parse_ids, progress_bar

if TYPE_CHECKING:
    from envfarm.envs.harbor.check import Check, CheckRow

app = typer.Typer(help="Harbor task directories: check them statically, or validate them here (build "
                  "offline, oracle, no-op agent).", no_args_is_help=True)
console = Console()
err = Console(stderr=True)


TasksOpt = Annotated[Path, typer.Option(
    "--tasks", help="A folder of Harbor task directories, or one task directory.")]
TaskIdsOpt = Annotated[list[str] | None, typer.Option(
    "--task-ids", help="Task directory names: --task-ids A B C (default: all).")]
RunIdOpt = Annotated[str, typer.Option("--run-id", help="Run id; the same id resumes a run.")]
WorkersOpt = Annotated[int, typer.Option("--max-workers", min=1, help="Tasks built and run at once.")]
RepeatOpt = Annotated[int, typer.Option("--repeat", min=1, help="Oracle runs per task (flakiness).")]
BackendOpt = Annotated[str, typer.Option("--backend", help="Sandbox backend: bwrap or docker.")]
PruneOpt = Annotated[bool, typer.Option(
    "--prune-images", help="Remove what each task built, and the wheels it downloaded, once no task left in "
    "the run needs them (thousands of tasks on a small disk); tasks then run grouped by their apt packages "
    "and shared pip layer.")]
SampleOpt = Annotated[int | None, typer.Option(
    "--sample", min=1, help="Validate a random sample of this many tasks (after --task-ids); default: all.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of --sample: the same seed picks the same tasks.")]
ReportOpt = Annotated[Path | None, typer.Option(
    "--report", help="Also write the counts and every task's row as JSON to this file.")]
JsonOpt = Annotated[bool, typer.Option(
    "--json", help="Print JSON (what --report writes) instead of a table.")]


def _ids(task_ids: list[str] | None, ctx: typer.Context) -> tuple[str, ...]:
    return tuple(parse_ids(task_ids, ctx.args, "--task-ids") or ())


@app.command("check", context_settings={"allow_extra_args": True})
def check_cmd(ctx: typer.Context, tasks: TasksOpt, task_ids: TaskIdsOpt = None, report: ReportOpt = None,
              as_json: JsonOpt = False) -> None:
    """Per task, statically (nothing built or run): does it load, does its Dockerfile build offline here
    (else validate's reason: needs-network, unsupported-base, ...), has it an oracle, does it ask for
    internet. Prints counts per reason."""
    import json

    from envfarm.envs.harbor.check import check_tasks, write_report
    from envfarm.envs.harbor.task import select_dirs

    ids = _ids(task_ids, ctx)
    total = len(select_dirs(tasks, list(ids) or None))  # a bad folder or id fails here, in one line
    with progress_bar(err, transient=True, disable=not err.is_terminal) as bar:
        job = bar.add_task("checking", total=total)
        result = check_tasks(tasks, ids, lambda row: bar.advance(job))
    if report is not None:
        write_report(result, report)
    if as_json:
        console.print_json(json.dumps(result.to_json()))
        return
    _print_check(result)
    if report is not None:
        console.print(str(report), highlight=False)


def _print_check(result: Check) -> None:
    """Counts per outcome (offline, or each reason), and how many of those tasks have an oracle and ask for
    internet."""
    table = Table("outcome", "tasks", "with oracle", "ask for internet")
    groups: dict[str, list[CheckRow]] = {"offline": [r for r in result.rows if r.offline]}
    for reason in result.reasons:
        groups[reason] = [r for r in result.rows if r.reason == reason]
    for name, rows in groups.items():
        table.add_row(name, str(len(rows)), str(sum(r.has_oracle for r in rows)),
                      str(sum(r.internet_requested for r in rows)))
    console.print(table)
    console.print(f"{len(result.rows)} tasks: {result.offline} offline, {len(result.rows) - result.offline} "
                  f"not; {result.with_oracle} with an oracle", highlight=False)


@app.command("validate", context_settings={"allow_extra_args": True})
def validate_cmd(
    ctx: typer.Context,
    tasks: TasksOpt,
    report_dir: Annotated[Path, typer.Option("--report-dir", help="Folder the reports go to.")],
    task_ids: TaskIdsOpt = None,
    run_id: RunIdOpt = "validate",
    max_workers: WorkersOpt = 2,
    repeat: RepeatOpt = 1,
    backend: BackendOpt = DEFAULT_BACKEND,
    prune_images: PruneOpt = False,
    sample: SampleOpt = None,
    seed: SeedOpt = 0,
) -> None:
    """Per task: build its image offline, run its oracle (solution/solve.sh) and a no-op agent; write
    validate.json and validate.md with a reason for every task that does not validate."""
    from envfarm.envs.harbor.task import select_dirs
    from envfarm.envs.harbor.validate import Event, ValidateConfig, num, validate_tasks

    ids = _ids(task_ids, ctx)
    every = len(select_dirs(tasks, list(ids) or None))  # unknown ids fail here, before any build
    total = min(every, sample or every)
    config = ValidateConfig(tasks=tasks, report_dir=report_dir, task_ids=ids, run_id=run_id,
                            max_workers=max_workers, repeat=repeat, backend=backend,
                            prune_images=prune_images, sample=sample, seed=seed)
    with progress_bar(err, disable=not err.is_terminal) as bar:
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
    if result.sample is not None:
        console.print(f"a random sample of {result.sample.n} of {result.sample.of} tasks (seed "
                      f"{result.sample.seed})", highlight=False)
    console.print(f"validated {done}/{len(result.rows)}; reasons: {reasons}\n{result.json_path}\n"
                  f"{result.markdown_path}", highlight=False)

