"""``envfarm images build|list|prune [--harness]``: every image envfarm builds, in one group.

Without ``--harness``: the sandbox images (recipes in images/: docker images and bwrap root filesystems).
With ``--harness``: the harness's SWE-bench images (an env image per repo/version, instance layers on it);
the code is ``envfarm/commands/harness.py``'s (``envfarm harness images ...``, its old spelling, is a hidden
alias for one release).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from envfarm.errors import ConfigError
from envfarm.sandbox import images

from . import harness as harness_images
from .harness import IdsOpt, SpecsOpt, SplitOpt
from .options import parse_ids

app = typer.Typer(
    help="Build, list and prune images: the sandboxes' (recipes in images/); with --harness, the harness's.",
    no_args_is_help=True,
)

STATUS_WIDTH = 90

HarnessOpt = Annotated[bool, typer.Option(
    "--harness", help="The harness's images (SWE-bench env and instance images) instead of the sandboxes'.")]


def _only(harness: bool, given: dict[str, object]) -> None:
    """ConfigError for options of the other kind of image (``--suite`` with ``--harness``, ...)."""
    wrong = [name for name, value in given.items() if value]
    if wrong:
        kind = "sandbox images (drop --harness)" if harness else "harness images (add --harness)"
        raise ConfigError(f"{', '.join(wrong)}: only for the {kind}")


@app.command("build", context_settings={"allow_extra_args": True})
def build(
    names: Annotated[
        list[str] | None,
        typer.Argument(help="Recipes to build (default: base and every layered image); with --harness, more "
                       "instance ids after --instance-ids.", show_default=False),
    ] = None,
    harness: HarnessOpt = False,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even when a current build exists (with "
                                        "--harness: without docker's layer cache; wheels stay cached).")
                     ] = False,
    suite: Annotated[
        list[str] | None,
        typer.Option(
            "--suite",
            help="Also build the base image of this Debian suite (bullseye, bookworm, trixie; repeatable). "
            "Alone, it builds only those bases.",
            show_default=False,
        ),
    ] = None,
    all_suites: Annotated[
        bool, typer.Option("--all-suites", help="Build the base image of every Debian suite in images/.")
    ] = False,
    instances: Annotated[Path | None, typer.Option(
        "--instances", help="With --harness: the task instances (JSON, JSONL, parquet or a datasets folder) "
        "whose env images to build, one per repo/version.")] = None,
    instance_ids: IdsOpt = None,
    specs: SpecsOpt = None,
    split: SplitOpt = "test",
    max_workers: Annotated[int, typer.Option(
        "--max-workers", min=1, help="With --harness: docker builds at once.")] = 2,
    report: Annotated[Path | None, typer.Option(
        "--report", help="With --harness: also write every build's outcome as JSON to this file.")] = None,
) -> None:
    """Build images from their recipes; a no-op for images that are already current. With --harness: the env
    image of every repo/version the --instances rows need (instance layers are built by `harness run`);
    failures are listed with their error and the others go on; exit code 1 if any failed.

    Without --suite/--all-suites only the default base (bookworm) and the layered images are built; harness
    env images build the base of the suite their spec needs on demand."""
    if harness:
        _only(True, {"--suite": suite, "--all-suites": all_suites})
        if instances is None:
            raise ConfigError("images build --harness builds the env images of task rows: give "
                              "--instances FILE")
        ids = parse_ids(instance_ids, names or [])
        harness_images.build_env_images(instances, ids, specs, split, max_workers, force, report)
        return
    _only(False, {"--instances": instances, "--instance-ids": instance_ids, "--specs": specs,
                  "--report": report})
    build_recipes(names or [], force, list(images.base_recipes()) if all_suites else list(suite or ()))


def build_recipes(names: list[str], force: bool, suites: list[str]) -> None:
    """Build the sandbox images ``names`` (default: all) and the bases of ``suites``; print a table."""
    console = Console(stderr=True)
    if not console.is_terminal:  # CI logs: no spinner; `envfarm -v images build` logs every step
        results = images.build(names or (), force=force, suites=suites)
    else:
        columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=True) as bar:
            task = bar.add_task("checking images", total=None)

            def progress(message: str) -> None:
                bar.update(task, description=escape(message[:STATUS_WIDTH]))

            results = images.build(names or (), force=force, progress=progress, suites=suites)
    table = Table("image", "tag", "result", "seconds", title="envfarm images build")
    for r in results:
        if r.docker_skipped:
            done = "built" if r.built else "up to date"
            result = f"[yellow]rootfs {done}; docker import skipped (no daemon)[/yellow]"
        elif not r.built:
            result = "[green]up to date[/green]"
        else:
            result = "[green]built[/green]"
        table.add_row(r.name, r.tag, result, f"{r.duration_s:.1f}")
    Console().print(table)


@app.command("list")
def list_(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table (an array; with "
                                          "--harness: per repo/version ('environments') and per image).")
                       ] = False,
    harness: HarnessOpt = False,
    each: Annotated[bool, typer.Option(
        "--each", help="With --harness: also list every image (kind, tag, own and total size).")] = False,
) -> None:
    """List envfarm images: in docker, as rootfs folders, and recipes not built yet. With --harness: the disk
    use of the harness images per repo/version, its env image plus the instance layers on it."""
    if harness:
        harness_images.list_env_images(as_json, each)
        return
    _only(False, {"--each": each})
    infos = images.list_images()
    if as_json:
        typer.echo(json.dumps([_jsonable(dataclasses.asdict(i)) for i in infos], indent=2))
        return
    table = Table(title="envfarm images")
    for column in ("name", "tag", "size MB", "created", "docker", "rootfs", "status"):
        table.add_column(column, overflow="fold")
    for i in infos:
        built = i.present_in_docker or i.rootfs_path is not None
        status = "[yellow]stale[/yellow]" if i.stale else "[green]current[/green]" if built else "not built"
        table.add_row(
            i.name,
            i.tag,
            "" if i.size_mb is None else f"{i.size_mb:.0f}",
            (i.created or "")[:19],
            "yes" if i.present_in_docker else "-",
            str(i.rootfs_path) if i.rootfs_path else "-",
            status,
        )
    Console().print(table)


@app.command("prune")
def prune(
    all_: Annotated[bool, typer.Option("--all", help="Remove every envfarm image (daemon-wide) and rootfs; "
                                       "with --harness: env images too (kept by default: rebuilding them is "
                                       "the slow part).")] = False,
    harness: HarnessOpt = False,
    repo: Annotated[list[str] | None, typer.Option(
        "--repo", help="With --harness: only this repo's images (owner/name; repeatable).")] = None,
) -> None:
    """Remove images, rootfs folders and wheelhouses not built from the current recipes. With --harness:
    instance images and pulled images (env images too with --all); all are rebuilt or pulled again on
    demand."""
    if harness:
        harness_images.prune_env_images(all_, repo)
        return
    _only(False, {"--repo": repo})
    result = images.prune(all=all_)
    console = Console()
    for item in result.removed:
        console.print(f"removed {escape(item)}", highlight=False)
    console.print(f"{len(result.removed)} removed, {result.bytes_freed / 1e6:.0f} MB freed")


def _jsonable(data: dict[str, Any]) -> dict[str, Any]:
    return {k: str(v) if isinstance(v, Path) else v for k, v in data.items()}
