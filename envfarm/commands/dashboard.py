"""``envfarm dashboard``: a browser view of farm runs, trajectories, training and harness results.

    envfarm dashboard --run runs/                     # every farm run in the farm's default folder
    envfarm dashboard --run runs/a --run trainer/out --run reports --port 8050

It reads the folders the farm, the trainer and the harness write (nothing else; see envfarm/dashboard/) and
serves one page with JSON and server-sent-event endpoints, offline. A folder holding no run is one
``error:`` line naming what it looked for, exit code 2.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from envfarm.dashboard.server import serve
from envfarm.dashboard.sources import Source

DEFAULT_RUNS = Path("runs")
KINDS = {"farm": "farm run", "trainer": "trainer run", "harness": "harness run"}

console = Console()


def dashboard(
    run: Annotated[list[Path] | None, typer.Option(
        "--run", help="A run folder: farm run (run.json), trainer run (metrics.jsonl), harness --report-dir, "
        "or a folder holding such runs. Repeat for more \\[default: runs/].")] = None,
    host: Annotated[str, typer.Option(help="Address to bind (loopback by default; the page shows every "
                                      "trajectory: keep it off shared networks).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on (0: any free port).")] = 8050,
) -> None:
    """Serve the dashboard: live farm view, trajectory browser, training curves, harness results."""
    paths = list(run or [DEFAULT_RUNS])
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(paths, host, port, ready=_ready))


def _ready(url: str, sources: Sequence[Source]) -> None:
    kinds = Counter(s.kind for s in sources)
    found = ", ".join(f"{n} {KINDS[k]}{'s' if n > 1 else ''}" for k, n in sorted(kinds.items()))
    console.print(f"dashboard on {url}  ({found}; Ctrl-C stops it)", highlight=False, soft_wrap=True)
