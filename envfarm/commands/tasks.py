"""``envfarm tasks mine|repos``: the task factory (library: ``envfarm.envs.code_repair.factory``)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from envfarm.errors import ConfigError
from envfarm.sandbox.values import IMAGE_BACKEND

if TYPE_CHECKING:
    from envfarm.envs.code_repair.factory.mine import MineReport
    from envfarm.envs.code_repair.factory.mine import Progress as MineProgress

app = typer.Typer(name="tasks", help="Code-repair task sets: mine tasks from PyPI projects.",
                  no_args_is_help=True)
console = Console()
log = logging.getLogger(__name__)


@app.command("mine")
def mine_command(
    package: Annotated[list[str], typer.Option("--package", "-p", help="NAME==VERSION; repeat for more.")],
    out: Annotated[Path, typer.Option("--out", help="Output JSONL (state goes to <out>.work/).")],
    max_tasks: Annotated[int, typer.Option("--max-tasks", min=1, help="Validated tasks per package.")] = 50,
    max_mutants: Annotated[
        int | None, typer.Option("--max-mutants", min=1, help="Mutants tried per package (10 x max-tasks).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Orders the mutation sites; same seed, same rows.")] = 0,
    backend: Annotated[str, typer.Option(help="Sandbox backend: docker or bwrap.")] = IMAGE_BACKEND,
    jobs: Annotated[int, typer.Option(min=1, help="Sandboxes testing mutants at once.")] = 2,
    validate_workers: Annotated[int, typer.Option("--validate-workers", min=1, help="Harness workers.")] = 4,
    no_validate: Annotated[bool, typer.Option("--no-validate", help="Skip harness validation.")] = False,
    find_links: Annotated[
        list[Path] | None, typer.Option("--find-links", help="Sdists from this folder instead of PyPI.")
    ] = None,
    report: Annotated[Path | None, typer.Option("--report", help="Write the figures as JSON.")] = None,
    recipes: Annotated[
        Path | None, typer.Option("--recipes", help="Recipe table (default: the factory's recipes.toml).")
    ] = None,
) -> None:
    """Mine SWE-bench-style tasks from PyPI sdists by AST mutation; every row is validated by the harness."""
    from envfarm.envs.code_repair.factory.mine import MineConfig, mine

    try:
        config = MineConfig(packages=tuple(package), out=out, max_tasks=max_tasks, max_mutants=max_mutants,
                            seed=seed, backend=backend, jobs=jobs, validate_workers=validate_workers,
                            harness_check=not no_validate, find_links=tuple(find_links or ()),
                            **({"recipes": recipes} if recipes is not None else {}))
    except ValidationError as e:
        first = e.errors()[0]
        raise ConfigError(f"--{str(first['loc'][0]).replace('_', '-')}: {first['msg']}") from None
    if recipes is not None and not recipes.is_file():
        raise ConfigError(f"--recipes {recipes} is not a file; pass a TOML recipe table (see "
                          "envs/code_repair/factory/recipes.toml)")
    with _progress() as bar:
        tasks: dict[str, TaskID] = {}

        def on_progress(ev: MineProgress) -> None:
            _advance(bar, tasks, ev)

        result = asyncio.run(mine(config, progress=on_progress))
    _print(result)
    if report is not None:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(json.dumps(_as_json(result), indent=2))


@app.command("repos")
def repos_command(
    tasks: Annotated[Path, typer.Option("--tasks", help="Mined JSONL (rows with envfarm_source).")],
    out: Annotated[Path, typer.Option("--out", help="Folder for repos/ and specs/.")],
    find_links: Annotated[
        list[Path] | None, typer.Option("--find-links", help="Sdists from this folder instead of PyPI.")
    ] = None,
) -> None:
    """Rebuild the git repos and env specs of mined rows from PyPI alone (no git mirror needed)."""
    from envfarm.envs.code_repair.factory.repo import rebuild
    from envfarm.harness.instances import read_rows

    rows = read_rows(tasks)
    repos, specs = rebuild(rows, out, out / "sdists", tuple(find_links or ()))
    console.print(f"{len(rows)} rows: repos in {repos}, specs in {specs}\n"
                  f"evaluate: envfarm harness run --instances {tasks} --repo-source {repos} --specs {specs} "
                  "--predictions gold --run-id check", highlight=False)


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[extra]}"), TimeElapsedColumn(), console=console, transient=False)


def _advance(bar: Progress, tasks: dict[str, TaskID], ev: MineProgress) -> None:
    if ev.stage == "prepare":
        tasks[ev.package] = bar.add_task(f"{ev.package}: preparing", total=None, extra=ev.detail)
    elif ev.stage == "mutants":
        bar.update(tasks[ev.package], description=f"{ev.package}: mutants", completed=ev.done,
                   total=ev.total, extra=f"kept {ev.kept}")
    elif ev.stage == "validate":
        key = f"validate:{ev.package}"
        if key not in tasks:
            tasks[key] = bar.add_task(f"{ev.package}: harness validation", total=ev.total, extra="")
        bar.update(tasks[key], completed=ev.done, total=ev.total)


def _print(r: MineReport) -> None:
    table = Table("package", "candidates", "tried", "ran now", "kept", "validated", "emitted", "tests",
                  "mine s")
    for p in r.packages:
        table.add_row(escape(p.package), str(p.candidates), str(p.tried), str(p.ran), str(p.kept),
                      str(p.validated), str(p.emitted), str(p.tests_passing), f"{p.mine_s:.0f}")
    console.print(table)
    console.print(f"{r.rows} tasks written to {r.out} in {r.wall_s:.0f}s (validation {r.validate_s:.0f}s); "
                  f"{len(r.invalid)} rows failed validation", highlight=False)
    work = Path(f"{r.out}.work")
    console.print(f"evaluate: envfarm harness run --instances {r.out} --repo-source {work / 'repos'} "
                  f"--specs {work / 'specs'} --predictions gold --run-id check", highlight=False)


def _as_json(result: MineReport) -> dict[str, object]:
    from dataclasses import asdict

    data = asdict(result)
    data["out"] = str(data["out"])
    return data
