"""``envfarm tasks mine|recipes|repos``: the task factory (library: ``envfarm.envs.code_repair.factory``).

    envfarm tasks mine --package attrs==23.1.0 --instances attrs.jsonl     # one JSONL of task instances
    envfarm tasks mine --packages-file projects.txt --out catalogue/        # a folder: one JSONL per project
    envfarm tasks repos --instances attrs.jsonl --out rebuilt/              # their repos and env specs
    envfarm tasks export --format harbor --out harbor/                # the built-in tasks, Harbor dirs
"""

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
from envfarm.sandbox.values import DEFAULT_BACKEND

from .harness import IdsOpt, RepoSourceOpt, SpecsOpt
from .options import deprecated, old_spelling, parse_ids

if TYPE_CHECKING:
    from envfarm.envs.code_repair.factory.catalogue import CatalogueReport
    from envfarm.envs.code_repair.factory.mine import MineReport
    from envfarm.envs.code_repair.factory.mine import Progress as MineProgress
    from envfarm.envs.code_repair.factory.prepare import Inferred

app = typer.Typer(name="tasks", help="Code-repair task sets: mine tasks from PyPI projects.",
                  no_args_is_help=True)
console = Console()
log = logging.getLogger(__name__)


@app.command("mine")
def mine_command(
    instances: Annotated[Path | None, typer.Option(
        "--instances", help="With --package: the JSONL of task instances to write (state in <it>.work/; "
        "`harness run --instances` reads it).")] = None,
    out: Annotated[Path | None, typer.Option(
        "--out", help="With --packages-file: the catalogue folder (a task list per project, catalogue.json).")
    ] = None,
    package: Annotated[
        list[str] | None, typer.Option("--package", "-p", help="NAME==VERSION; repeat for more.")
    ] = None,
    packages_file: Annotated[
        Path | None, typer.Option("--packages-file", help="NAME==VERSION lines: mine a catalogue into the "
                                  "--out folder, resumable.")
    ] = None,
    max_tasks: Annotated[int, typer.Option("--max-tasks", min=1, help="Validated tasks per package.")] = 50,
    max_mutants: Annotated[
        int | None, typer.Option("--max-mutants", min=1, help="Mutants tried per package (10 x max-tasks).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Orders the mutation sites; same seed, same rows.")] = 0,
    mutations: Annotated[int, typer.Option(min=1, max=5, help="Edits per task (K > 1: K kept bugs of one "
                                           "file combined, harder tasks).")] = 1,
    backend: Annotated[str, typer.Option(help="Sandbox backend of the baseline and mutant test runs: bwrap "
                                         "or docker (harness validation runs on docker).")] = DEFAULT_BACKEND,
    jobs: Annotated[int, typer.Option(min=1, help="Sandboxes testing mutants at once (with --packages-file: "
                                      "projects at once, one sandbox each).")] = 2,
    validate_workers: Annotated[int, typer.Option("--validate-workers", min=1, help="Harness workers.")] = 4,
    no_validate: Annotated[bool, typer.Option("--no-validate", help="Skip harness validation.")] = False,
    no_coverage: Annotated[bool, typer.Option(
        "--no-coverage", help="Choose each mutant's test files by name only (default: the files that run its "
        "lines, from one run of the suite under coverage).")] = False,
    find_links: Annotated[
        list[Path] | None, typer.Option("--find-links", help="Sdists from this folder instead of PyPI.")
    ] = None,
    report: Annotated[Path | None, typer.Option(
        "--report", help="Also write the figures as JSON to this file.")] = None,
    recipes: Annotated[
        Path | None, typer.Option("--recipes", help="Recipe table (default: the factory's recipes.toml).")
    ] = None,
    retry_skipped: Annotated[bool, typer.Option(
        "--retry-skipped", help="With --packages-file: try projects recorded skipped again (an upgrade).")
    ] = False,
) -> None:
    """Mine SWE-bench-style tasks from PyPI sdists by AST mutation; every row is validated by the harness."""
    from envfarm.envs.code_repair.factory.catalogue import catalogue, read_packages_file
    from envfarm.envs.code_repair.factory.mine import MineConfig, mine

    if bool(package) == bool(packages_file):
        raise ConfigError("give --package NAME==VERSION (repeatable) or --packages-file FILE, one of the two")
    out = _mine_target(instances, out, catalogue=packages_file is not None)
    packages = read_packages_file(packages_file) if packages_file else tuple(package or ())
    try:
        config = MineConfig(packages=packages, out=out, max_tasks=max_tasks, max_mutants=max_mutants,
                            seed=seed, mutations=mutations, backend=backend, jobs=jobs,
                            validate_workers=validate_workers,
                            harness_check=not no_validate, coverage=not no_coverage,
                            find_links=tuple(find_links or ()),
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

        if packages_file is not None:
            book = asyncio.run(catalogue(config, progress=on_progress, retry_skipped=retry_skipped))
            _print_catalogue(book)
            figures = (book.out / "catalogue.json").read_text()
        else:
            result = asyncio.run(mine(config, progress=on_progress))
            _print(result)
            figures = json.dumps(_as_json(result), indent=2)
    if report is not None:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(figures)


def _mine_target(instances: Path | None, out: Path | None, catalogue: bool) -> Path:
    """Where ``tasks mine`` writes: the --out folder of a catalogue, the --instances file of --package (or,
    for one release, --out naming that file, as it once did)."""
    if catalogue:
        if instances is not None:
            raise ConfigError("--packages-file mines a catalogue into a folder: give --out DIR, not "
                              "--instances")
        if out is None:
            raise ConfigError("--packages-file mines a catalogue into a folder: give --out DIR")
        return out
    if out is not None and instances is None and not out.is_dir():
        deprecated("tasks mine --package ... --out FILE", "tasks mine --package ... --instances FILE")
        return out
    if instances is None:
        raise ConfigError("--package mines into one JSONL file of task instances: give --instances FILE")
    if out is not None:
        raise ConfigError("--out is the catalogue folder of --packages-file; with --package give --instances "
                          "FILE only")
    return instances


@app.command("recipes")
def recipes_command(
    check: Annotated[
        list[str] | None, typer.Option("--check", help="NAME==VERSION: print what the factory infers for it.")
    ] = None,
    find_links: Annotated[
        list[Path] | None, typer.Option("--find-links", help="Sdists from this folder instead of PyPI.")
    ] = None,
    recipes: Annotated[
        Path | None, typer.Option("--recipes", help="Recipe table (default: the factory's recipes.toml).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
) -> None:
    """The recipe overrides in use, or (--check) the inferred test command, dependencies and test files."""
    from envfarm import config as home
    from envfarm.envs.code_repair.factory.prepare import infer
    from envfarm.envs.code_repair.factory.recipe import RECIPES_FILE, read_recipes
    from envfarm.envs.code_repair.factory.sdist import parse_spec

    table = recipes or RECIPES_FILE
    if not check:
        data = read_recipes(table)
        console.print(f"{len(data.packages)} projects with overrides in {table} (every other project: "
                      "inferred)", highlight=False, soft_wrap=True)
        for name, own in sorted(data.packages.items()):
            keys = {k: v for k, v in own.model_dump().items() if v is not None}
            console.print(f"  {escape(name)}: {escape(json.dumps(keys))}", highlight=False, soft_wrap=True)
        return
    links = tuple(find_links or ())
    found = [infer(parse_spec(text), home.home() / "sdists", links, table) for text in check]
    if as_json:
        typer.echo(json.dumps([_inferred_json(f) for f in found], indent=2))
        return
    for f in found:
        _print_inferred(f)


def _inferred_json(f: Inferred) -> dict[str, object]:
    lay = f.layout
    return {"package": str(f.spec), "sdist": f.sdist.path.name, "sha256": f.sdist.sha256,
            "test_cmd": f.test_cmd, "test_paths": list(lay.test_paths), "origin": lay.origin,
            "config_file": lay.config.file, "python_files": list(lay.config.python_files),
            "in_package": lay.in_package, "test_files": list(lay.test_files),
            "skipped": [list(s) for s in lay.skipped], "pythonpath": lay.pythonpath,
            "source_files": len(lay.source_files),
            "dependencies": [{"requirement": d.requirement, "origin": d.origin} for d in f.dependencies],
            "overrides": list(f.overrides)}


def _print_inferred(f: Inferred) -> None:
    lay = f.layout

    def out(text: str) -> None:
        console.print(text, highlight=False, soft_wrap=True)

    out(f"[bold]{escape(str(f.spec))}[/bold] ({escape(f.sdist.path.name)})")
    out(f"  test command: {escape(f.test_cmd)} {escape(' '.join(lay.test_paths))}")
    where = f"{lay.origin}; python_files {' '.join(lay.config.python_files)}"
    out(f"  test paths:   {escape(', '.join(lay.test_paths))} ({escape(where)}"
        f"{', config ' + lay.config.file if lay.config.file else ''})")
    out(f"  test files:   {len(lay.test_files)}{' (inside the package)' if lay.in_package else ''}: "
        f"{escape(', '.join(lay.test_files[:6]))}{' ...' if len(lay.test_files) > 6 else ''}")
    for path, why in lay.skipped:
        out(f"  not a test:   {escape(path)}: {escape(why)}")
    out(f"  source:       {len(lay.source_files)} files to mutate, PYTHONPATH={lay.pythonpath}")
    out("  dependencies:")
    for d in f.dependencies:
        out(f"    {escape(d.requirement):32} {escape(d.origin)}")
    own = ", ".join(f.overrides) if f.overrides else "none (everything above was inferred)"
    out(f"  overrides:    {escape(own)}")


@app.command("repos")
def repos_command(
    out: Annotated[Path, typer.Option("--out", help="Folder for repos/ and specs/.")],
    instances: Annotated[Path | None, typer.Option(
        "--instances", help="Mined task instances (JSONL rows with envfarm_source).")] = None,
    find_links: Annotated[
        list[Path] | None, typer.Option("--find-links", help="Sdists from this folder instead of PyPI.")
    ] = None,
    old_tasks: Annotated[Path | None, typer.Option("--tasks", hidden=True, help="Deprecated: --instances.")
                         ] = None,
) -> None:
    """Rebuild the git repos and env specs of mined rows from PyPI alone (no git mirror needed)."""
    from envfarm.envs.code_repair.factory.repo import rebuild
    from envfarm.harness.instances import read_rows

    tasks = old_spelling(instances, old_tasks, "tasks repos --tasks FILE", "tasks repos --instances FILE")
    if tasks is None:
        raise ConfigError("give --instances FILE: the JSONL `tasks mine` wrote")

    rows = read_rows(tasks)
    repos, specs = rebuild(rows, out, out / "sdists", tuple(find_links or ()))
    console.print(f"{len(rows)} rows: repos in {repos}, specs in {specs}\n"
                  f"evaluate: envfarm harness run --instances {tasks} --repo-source {repos} --specs {specs} "
                  "--predictions gold --run-id check", highlight=False)


@app.command("export", context_settings={"allow_extra_args": True})
def export_command(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option("--out", help="Folder for the task folders (one per task).")],
    export_format: Annotated[str, typer.Option(
        "--format", help="Task directory format: harbor (task.toml, instruction.md, environment/, tests/, "
        "solution/).")] = "harbor",
    instances: Annotated[Path | None, typer.Option(
        "--instances", help="Task instances (SWE-bench rows: JSON, JSONL, parquet, a datasets folder, or a "
        "`tasks mine` catalogue folder); default: the built-in tasks.")] = None,
    instance_ids: IdsOpt = None,
    repo_source: RepoSourceOpt = None,
    specs: SpecsOpt = None,
) -> None:
    """Export CodeRepair tasks as task directories; builds each task's image first when it is missing."""
    from envfarm.envs.code_repair.env import CodeRepairEnv
    from envfarm.envs.code_repair.harbor_export import Exported, export_harbor

    if export_format != "harbor":
        raise ConfigError(f"--format {export_format}: the one export format is harbor")
    ids = parse_ids(instance_ids, ctx.args)
    env = CodeRepairEnv(tasks=instances, instance_ids=ids, repo_source=repo_source, specs=tuple(specs or ()))
    with _progress() as bar:
        task = bar.add_task("export (harbor)", total=len(env.plans), extra="")

        def advance(item: Exported) -> None:
            bar.update(task, advance=1, extra=item.instance_id)

        done = asyncio.run(export_harbor(env, out, progress=advance))
    console.print(f"{len(done)} Harbor task folders in {out}", highlight=False, soft_wrap=True)


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[extra]}"), TimeElapsedColumn(), console=console, transient=False)


def _advance(bar: Progress, tasks: dict[str, TaskID], ev: MineProgress) -> None:
    if ev.stage in ("project", "cached"):
        what = "recorded" if ev.stage == "cached" else "finished"
        console.print(f"{escape(ev.package)}: {what}, {ev.detail.strip()}, {ev.done} tasks", highlight=False)
    elif ev.stage == "prepare":
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


def _print_catalogue(book: CatalogueReport) -> None:
    table = Table("package", "status", "tasks", "tests from", "time s", "reason")
    for p in book.projects:
        origin = str(p.report.get("origin", ""))
        table.add_row(escape(p.package), p.status, str(p.tasks), escape(origin), f"{p.time_s:.0f}",
                      escape(p.reason))
    console.print(table)
    done = sum(p.status == "done" for p in book.projects)
    with_tasks = sum(p.tasks > 0 for p in book.projects)
    console.print(f"{book.tasks} tasks from {with_tasks} of {len(book.projects)} projects ({done} mined) "
                  f"in {book.out}; catalogue: {book.out / 'catalogue.json'}", highlight=False, soft_wrap=True)


def _as_json(result: MineReport) -> dict[str, object]:
    from dataclasses import asdict

    data = asdict(result)
    data["out"] = str(data["out"])
    return data
