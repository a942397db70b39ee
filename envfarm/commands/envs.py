"""``envfarm envs list|check|serve``: the registered environments, their conformance suite, and any of them
served over OpenEnv's protocol (``serve`` lives in ``envfarm/commands/openenv.py``)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import TaskID
from rich.table import Table

from envfarm.sandbox import BACKENDS, DEFAULT_BACKEND

from .farm import EnvArgsOpt, parse_env_kwargs
from .openenv import serve_command
from .options import progress_bar

app = typer.Typer(name="envs", no_args_is_help=True,
                  help="Registered environments: list them, run the conformance suite, serve one (OpenEnv).")
console = Console()
app.command("serve")(serve_command)


@app.command("list")
def list_envs(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List every registered env: id, source package, description (plugins included)."""
    from envfarm.envs import plugin_errors, registered

    envs = registered()
    if as_json:
        typer.echo(json.dumps([asdict(e) for e in envs], indent=2))
        return
    table = Table(title="envfarm environments")
    for col in ("id", "source", "description"):
        table.add_column(col)
    for e in envs:
        table.add_row(e.id, e.source, e.description)
    console.print(table)
    for err in plugin_errors():
        console.print(f"[red]plugin {err.name} ({err.value}) failed to load:[/red] {err.error}")


@app.command("check")
def check(
    env_id: Annotated[str, typer.Argument(help="Registered env id, e.g. envfarm/ToolCalc-v0.")],
    backend: Annotated[str, typer.Option(help=f"Sandbox backend: {', '.join(BACKENDS)}.")] = DEFAULT_BACKEND,
    seeds: Annotated[int, typer.Option(min=1, help="Seeds the oracle must solve (>= 99%).")] = 200,
    leak_episodes: Annotated[int, typer.Option(min=1, help="Episodes run for the leak check.")] = 100,
    vector: Annotated[bool, typer.Option(help="Also run it in gymnasium's AsyncVectorEnv.")] = True,
    env_kwargs: EnvArgsOpt = None,
) -> None:
    """Run the conformance suite (envs/checks.py) on any registered env; exit 1 if a check fails."""
    from envfarm.envs import env_info
    from envfarm.envs.checks import run_conformance
    from envfarm.sandbox import get_backend

    env_info(env_id)  # a clear error for an unknown id, before anything starts
    get_backend(backend)  # and for an unknown backend
    with progress_bar(console, transient=True) as progress:
        bars: dict[str, TaskID] = {}

        def update(name: str, done: int, total: int) -> None:
            if name not in bars:
                bars[name] = progress.add_task(name, total=total)
            progress.update(bars[name], completed=done)

        report = run_conformance(env_id, backend, seeds, leak_episodes, vector, update,
                                 parse_env_kwargs(env_kwargs) if env_kwargs else None)
    table = Table(title=f"{env_id} on {backend}")
    for col in ("check", "result", "seconds", "detail"):
        table.add_column(col)
    for r in report.results:
        mark = "[green]pass[/green]" if r.passed else "[red]FAIL[/red]"
        table.add_row(r.name, mark, f"{r.seconds:.1f}", r.detail)
    console.print(table)
    if not report.passed:
        raise typer.Exit(1)
