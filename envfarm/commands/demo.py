"""``envfarm demo``: the job `make demo` runs on embedded defaults.

1. The rollout farm plays each built-in tool-use env (ToolCalc, SqlQuery, FileOps, OrderDesk) with the
   oracle policy, many episodes in flight in warm sandboxes, trajectories written to ``out/demo/<env>/``.
2. Hostile commands (a fork bomb, a memory hog, a runaway) are contained without harming the sandbox.

It ends with summary tables and exits non-zero if an episode failed, an oracle was not rewarded, or a
sandbox was left behind.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from envfarm.errors import FarmError
from envfarm.rollout import Farm, FarmConfig, OraclePolicy, Summary
from envfarm.sandbox import Backend, Limits, get_backend
from envfarm.sandbox.values import DEFAULT_BACKEND

console = Console()
ENVS = ("envfarm/ToolCalc-v0", "envfarm/SqlQuery-v0", "envfarm/FileOps-v0", "envfarm/OrderDesk-v0")
HOSTILE = {
    "fork bomb": (":(){ :|:& };:", Limits(pids=64, timeout_s=5)),
    "memory hog": ("python3 -c 'b = bytearray(1 << 30)'", Limits(memory_mb=128)),
    "runaway": ("sleep 600", Limits(timeout_s=1)),
}


async def farm_env(env_id: str, backend: str, episodes: int, concurrency: int, out: Path,
                   progress: Progress) -> Summary:
    """Play ``episodes`` oracle episodes of ``env_id``; trajectories and summary go under ``out``."""
    config = FarmConfig(env_id, episodes, concurrency=concurrency, backend=backend, step_slots=4)
    run_dir = out / env_id.replace("/", "_")
    farm = Farm(config, OraclePolicy(), run_dir=run_dir, summary_path=run_dir / "summary.json")
    task = progress.add_task(env_id, total=episodes)
    async for _ in farm.run():
        progress.advance(task)
    return farm.summary()


async def contain(backend: Backend) -> dict[str, str]:
    """Run each hostile command in its own sandbox; report what stopped it and whether it survived."""
    out = {}
    for name, (cmd, limits) in HOSTILE.items():
        async with backend.open(limits=limits) as sb:
            res = await sb.exec(cmd)
            after = await sb.exec("echo alive")
        how = "timeout" if res.timed_out else f"exit {res.exit_code}"
        if "Resource temporarily unavailable" in res.stderr:
            how += ", pids cap hit"
        elif res.exit_code == -9 and not res.timed_out:
            how += ", OOM-killed"
        out[name] = f"{how}; sandbox {'alive' if after.stdout.strip() == 'alive' else 'DEAD'}"
    return out


async def run_demo(backend_name: str, episodes: int, concurrency: int, out: Path,
                   progress: Progress) -> tuple[list[Summary], dict[str, str]]:
    summaries = [await farm_env(env, backend_name, episodes, concurrency, out, progress) for env in ENVS]
    backend = get_backend(backend_name)
    await backend.check()
    hostile = await contain(backend)
    await backend.aclose()
    leaked = await backend.gc()
    if backend.live or leaked:
        raise FarmError(f"{backend_name}: {backend.live + leaked} sandboxes were left behind")
    return summaries, hostile


def render(summaries: list[Summary], hostile: dict[str, str], backend: str) -> tuple[Table, Table]:
    farm = Table(title=f"rollout farm, oracle policy, {backend} sandboxes")
    for col in ("env", "episodes", "failed", "infra errors", "mean reward", "steps/s", "max in flight"):
        farm.add_column(col)
    for s in summaries:
        reward = "-" if s.mean_reward is None else f"{s.mean_reward:.3f}"
        farm.add_row(s.env_id.removeprefix("envfarm/"), str(s.episodes_completed), str(s.episodes_failed),
                     str(s.infra_errors), reward, f"{s.steps_per_s:.0f}", str(s.max_concurrent))
    box = Table(title="hostile commands")
    box.add_column("attack")
    box.add_column("outcome")
    for name, outcome in hostile.items():
        box.add_row(name, outcome)
    return farm, box


def demo(
    backend: Annotated[str, typer.Option(help="Sandbox backend: bwrap or docker.")] = DEFAULT_BACKEND,
    episodes: Annotated[int, typer.Option(min=1, help="Episodes per env.")] = 100,
    concurrency: Annotated[int, typer.Option(min=1, help="Episodes in flight at once.")] = 32,
    out: Annotated[Path, typer.Option(help="Run folders (trajectories, summaries).")] = Path("out/demo"),
) -> None:
    """Farm oracle episodes of every built-in env and contain hostile commands; print a summary."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        summaries, hostile = asyncio.run(run_demo(backend, episodes, concurrency, out, progress))
    for table in render(summaries, hostile, backend):
        console.print(table)
    console.print(f"trajectories and summaries: {out}/")
    bad = [s.env_id for s in summaries if s.episodes_failed or (s.mean_reward or 0) < 1.0]
    if bad or "DEAD" in "".join(hostile.values()):
        raise typer.Exit(1)
