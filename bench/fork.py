"""Fork benchmark: ``sandbox.fork()`` of a parent holding a prepared tree; prints and writes JSON.

    python bench/fork.py                          # docker + bwrap, 2,000 files / 40 MB, 32 children
    python bench/fork.py --backends bwrap --children 8 --out /tmp/fork.json

Per backend, within one run (the machine is shared and noisy): the exec step (``exec(["true"])`` round
trip through the agent), fork p50/p99 over the children (all kept live until the end), and a cold open +
prepare (start a fresh sandbox and write the same tree), reported as ratios. Targets: bwrap fork p50 <= 10x
its exec step, docker <= 150x; a fork >= 20x faster than a cold open + prepare.

``fork()`` returns once the snapshot is taken and the child's overlays are mounted; the child's processes
start in the background. ``fork_ready`` is the other figure: one fork and the child's first command
answered, one child at a time (nothing else booting).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

from envfarm.sandbox import Backend, Limits, Sandbox, get_backend

TARGET_STEP_RATIO = {"docker": 150.0, "bwrap": 10.0}
TARGET_COLD_RATIO = 20.0
LIMITS = Limits(memory_mb=512, disk_mb=256)
PREPARE = """import os
files, size = {files}, {size}
for i in range(files):
    d = f"/workspace/tree/d{{i % 40:02d}}"
    os.makedirs(d, exist_ok=True)
    with open(f"{{d}}/f{{i:05d}}.bin", "wb") as f:
        f.write(os.urandom(size))
"""


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def ms(xs: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(xs) * 1e3, 3), "p99_ms": round(pct(xs, 0.99) * 1e3, 3),
            "n": len(xs)}


async def prepare(sb: Sandbox, files: int, mb: int) -> None:
    script = PREPARE.format(files=files, size=(mb << 20) // files)
    await sb.exec(["python3", "-c", script], timeout_s=120, check=True)


async def exec_step(sb: Sandbox, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        await sb.exec(["true"])
        out.append(time.perf_counter() - t)
    return out


async def forks(parent: Sandbox, n: int) -> list[float]:
    children: list[Sandbox] = []
    out = []
    try:
        for _ in range(n):
            t = time.perf_counter()
            children.append(await parent.fork())
            out.append(time.perf_counter() - t)
        count = await children[-1].exec("find /workspace/tree -type f | wc -l", check=True)
        assert int(count.stdout) > 0, "the last child has no tree"
    finally:
        await asyncio.gather(*(c.close() for c in children), return_exceptions=True)
    return out


async def forks_ready(parent: Sandbox, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        async with await parent.fork() as child:
            await child.exec(["true"], check=True)
            out.append(time.perf_counter() - t)
    return out


async def cold(backend: Backend, n: int, files: int, mb: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        async with backend.open(limits=LIMITS) as sb:
            await prepare(sb, files, mb)
            out.append(time.perf_counter() - t)
    return out


async def bench_backend(name: str, args: argparse.Namespace) -> dict[str, object]:
    backend = get_backend(name)
    await backend.check()
    try:
        async with backend.open(limits=LIMITS) as parent:
            await prepare(parent, args.files, args.mb)
            step = ms(await exec_step(parent, args.steps))
            fork = ms(await forks(parent, args.children))
            ready = ms(await forks_ready(parent, args.ready))
        cold_open = ms(await cold(backend, args.cold, args.files, args.mb))
    finally:
        await backend.aclose()
    step_ratio = fork["p50_ms"] / step["p50_ms"]
    cold_ratio = cold_open["p50_ms"] / fork["p50_ms"]
    return {
        "exec_step": step, "fork": fork, "fork_ready": ready, "cold_open_prepare": cold_open,
        "fork_over_step_p50": round(step_ratio, 2), "cold_over_fork_p50": round(cold_ratio, 2),
        "targets": {f"fork_p50<={TARGET_STEP_RATIO[name]:g}x_step": step_ratio <= TARGET_STEP_RATIO[name],
                    f"fork>={TARGET_COLD_RATIO:g}x_faster_than_cold": cold_ratio >= TARGET_COLD_RATIO},
    }


async def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="bwrap,docker")
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--mb", type=int, default=40)
    ap.add_argument("--children", type=int, default=32)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--ready", type=int, default=10, help="forks timed until the child answers")
    ap.add_argument("--cold", type=int, default=5, help="cold open + prepare repetitions")
    ap.add_argument("--out", default="bench/results/fork.json")
    args = ap.parse_args(argv)
    report: dict[str, object] = {
        "measured": datetime.date.today().isoformat(), "cpus": os.cpu_count(),
        "tree": {"files": args.files, "mb": args.mb}, "children": args.children, "backends": {},
    }
    for name in args.backends.split(","):
        print(f"== {name}", file=sys.stderr)
        report["backends"][name] = await bench_backend(name, args)  # type: ignore[index]
    text = json.dumps(report, indent=2)
    print(text)
    out = Path(args.out)
    await asyncio.to_thread(out.parent.mkdir, parents=True, exist_ok=True)
    await asyncio.to_thread(out.write_text, text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
