"""``envfarm demo``: the job `make demo` runs on embedded defaults.

It shows the sandbox layer doing real work: a warm pool of locked-down sandboxes per backend, a batch of
small "episodes" (write a Python program into the sandbox, run it, check its answer), and hostile commands
(a fork bomb, a memory hog, a timeout) contained without harming the others. It ends with a summary table
and exits non-zero if any episode answered wrongly or any sandbox was left behind.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from envfarm.errors import FarmError
from envfarm.sandbox import Backend, Limits, get_backend
from envfarm.sandbox.pool import SandboxPool

console = Console()
PROGRAM = "import sys\nn = int(sys.argv[1])\nprint(sum(i * i for i in range(n + 1)))\n"
HOSTILE = {
    "fork bomb": (":(){ :|:& };:", Limits(pids=64, timeout_s=5)),
    "memory hog": ("python3 -c 'b = bytearray(1 << 30)'", Limits(memory_mb=128)),
    "runaway": ("sleep 600", Limits(timeout_s=1)),
}


@dataclass(frozen=True)
class BackendReport:
    backend: str
    episodes: int
    correct: int
    wall_s: float
    step_p50_ms: float
    hostile: dict[str, str]


async def episode(pool: SandboxPool, n: int) -> tuple[bool, list[float]]:
    """One small task: write a program, run it three times, check the answers."""
    steps = []
    async with pool.lease(deadline_s=60) as sb:
        await sb.write_file("task.py", PROGRAM)
        ok = True
        for k in (n, n + 1, n + 2):
            res = await sb.exec(["python3", "task.py", str(k)])
            steps.append(res.duration)
            ok = ok and res.stdout.strip() == str(sum(i * i for i in range(k + 1)))
    return ok, steps


async def contain(backend: Backend) -> dict[str, str]:
    """Run each hostile command in its own sandbox; report what stopped it."""
    out = {}
    for name, (cmd, limits) in HOSTILE.items():
        async with backend.open(limits=limits) as sb:
            res = await sb.exec(cmd)
            after = await sb.exec("echo alive")
        how = "timeout" if res.timed_out else f"exit {res.exit_code}"
        state = "alive" if after.stdout.strip() == "alive" else "DEAD"
        out[name] = f"{how}; sandbox {state}"
    return out


async def run_backend(name: str, episodes: int, concurrency: int, progress: Progress) -> BackendReport:
    backend = get_backend(name)
    await backend.check()
    task = progress.add_task(f"{name}: episodes", total=episodes)
    gate = asyncio.Semaphore(concurrency)
    steps: list[float] = []
    correct = 0

    async def one(i: int) -> None:
        nonlocal correct
        async with gate:
            ok, times = await episode(pool, 100 + i)
        correct += ok
        steps.extend(times)
        progress.advance(task)

    t0 = time.perf_counter()
    async with SandboxPool(backend, limits=Limits(memory_mb=256), size=concurrency) as pool:
        async with asyncio.TaskGroup() as tg:
            for i in range(episodes):
                tg.create_task(one(i))
    wall = time.perf_counter() - t0
    hostile = await contain(backend)
    await backend.aclose()
    leaked = await backend.gc()
    if backend.live or leaked:
        raise FarmError(f"{name}: {backend.live + leaked} sandboxes were left behind")
    return BackendReport(name, episodes, correct, wall, statistics.median(steps) * 1e3, hostile)


def render(reports: list[BackendReport]) -> Table:
    table = Table(title="envfarm demo: sandboxes")
    for col in ("backend", "episodes", "correct", "episodes/s", "step p50 ms", *HOSTILE):
        table.add_column(col)
    for r in reports:
        table.add_row(r.backend, str(r.episodes), str(r.correct), f"{r.episodes / r.wall_s:.1f}",
                      f"{r.step_p50_ms:.1f}", *(r.hostile[k] for k in HOSTILE))
    return table


def demo(
    backends: Annotated[str, typer.Option(help="Comma-separated backends to run.")] = "docker,bwrap",
    episodes: Annotated[int, typer.Option(min=1, help="Episodes per backend.")] = 64,
    concurrency: Annotated[int, typer.Option(min=1, help="Episodes in flight at once.")] = 16,
) -> None:
    """Run small episodes and hostile commands in warm sandbox pools; print a summary."""
    reports = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        for name in backends.split(","):
            reports.append(asyncio.run(run_backend(name.strip(), episodes, concurrency, progress)))
    console.print(render(reports))
    if any(r.correct != r.episodes or "DEAD" in "".join(r.hostile.values()) for r in reports):
        raise typer.Exit(1)
