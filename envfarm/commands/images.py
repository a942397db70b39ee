"""``envfarm images build|list|prune``: the sandbox images (docker images and bwrap root filesystems)."""

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

from envfarm.sandbox import images

app = typer.Typer(
    help="Build, list and prune sandbox images (recipes in images/).",
    no_args_is_help=True,
)

STATUS_WIDTH = 90


@app.command("build")
def build(
    names: Annotated[
        list[str] | None,
        typer.Argument(help="Recipes to build (default: base and every layered image).", show_default=False),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even when a current build exists.")] = False,
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
) -> None:
    """Build images from their recipes; a no-op for images that are already current.

    Without --suite/--all-suites only the default base (bookworm) and the layered images are built; harness
    env images build the base of the suite their spec needs on demand."""
    suites = list(images.base_recipes()) if all_suites else list(suite or ())
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
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array instead of a table.")] = False,
) -> None:
    """List envfarm images: in docker, as rootfs folders, and recipes not built yet."""
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
    all_: Annotated[
        bool, typer.Option("--all", help="Remove every envfarm image (daemon-wide) and rootfs.")
    ] = False,
) -> None:
    """Remove images, rootfs folders and wheelhouses not built from the current recipes."""
    result = images.prune(all=all_)
    console = Console()
    for item in result.removed:
        console.print(f"removed {escape(item)}", highlight=False)
    console.print(f"{len(result.removed)} removed, {result.bytes_freed / 1e6:.0f} MB freed")


def _jsonable(data: dict[str, Any]) -> dict[str, Any]:
    return {k: str(v) if isinstance(v, Path) else v for k, v in data.items()}
