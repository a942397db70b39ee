"""Sandbox benchmark: start, acquire, step latency, throughput and memory per backend; prints and writes JSON.

    python bench/sandbox.py                      # docker + bwrap, full sizes (500 docker, 1,000 bwrap live)
    python bench/sandbox.py --quick              # small sizes, a smoke run
    python bench/sandbox.py --steps-only         # only the step latency (the filters' cost), seconds
    python bench/sandbox.py --backends bwrap --out bench/results/sandbox.json
    python bench/sandbox.py --live-only          # the live-count load test: 5,000 bwrap (forks), 1,000 docker
    python bench/sandbox.py --live-only --backends bwrap --live 500 --via open

``--live-only`` (``bench/sandbox_live.py``) opens ``--live`` sandboxes in bounded batches (``--via fork``,
bwrap's default: one prepared parent and forks of it, which share its layers), holds them all live at
once, checks that every one answers ``echo ok``, reports open seconds and MiB per sandbox (host
MemAvailable drop, and PSS of the processes of a few sandboxes), then closes them all and checks that
nothing is left (containers, bwrap processes, cgroups, layer store entries). It stops opening early, and
says which resource ran short, when host memory, file descriptors, process ids or its time budget would
run out (the machine is shared).

Ratios are measured within one run (this machine is shared and noisy): the step round trip of
``exec(["true"])`` is compared with a host ``posix_spawn`` of ``true`` timed in the same process, minutes
apart at most. Targets (on a 2-core VM): step <= 3x host spawn (bwrap), <= 4x (docker); warm acquire
p50 <= 5 ms; 1,000 bwrap and 500 docker sandboxes live at once; zero containers left afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import sandbox_live  # the live-count load test, in this folder (a script's folder is on sys.path)

from envfarm.sandbox import Backend, Limits, Sandbox, get_backend
from envfarm.sandbox.pool import SandboxPool

TARGET_STEP_RATIO = {"docker": 4.0, "bwrap": 3.0}
TARGET_LIVE = {"docker": 500, "bwrap": 1000}
IDLE_LIMITS = Limits(memory_mb=64, pids=32, disk_mb=16)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def summary(xs: list[float]) -> dict[str, float]:
    """Milliseconds: median and p90."""
    p50, p90 = statistics.median(xs), pct(xs, 0.9)
    return {"p50_ms": round(p50 * 1e3, 3), "p90_ms": round(p90 * 1e3, 3), "n": len(xs)}


def host_spawn_true(n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        pid = os.posix_spawn("/bin/true", ["true"], os.environ)
        os.waitpid(pid, 0)
        out.append(time.perf_counter() - t)
    return out


async def timed(n: int, fn: Callable[[], Awaitable[object]]) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        await fn()
        out.append(time.perf_counter() - t)
    return out


async def cold_start(backend: Backend, n: int) -> list[float]:
    async def one() -> None:
        sb = await backend.start(limits=IDLE_LIMITS)
        await sb.close()

    return await timed(n, one)


async def warm_acquire(backend: Backend, n: int) -> list[float]:
    out: list[float] = []
    async with SandboxPool(backend, limits=IDLE_LIMITS, size=4) as pool:
        for _ in range(n):
            while pool.stats().idle < 1:  # noqa: ASYNC110 - polling the pool's public stats
                await asyncio.sleep(0.01)
            t = time.perf_counter()
            async with pool.lease():
                out.append(time.perf_counter() - t)
    return out


async def open_many(backend: Backend, n: int, parallel: int = 16) -> list[Sandbox]:
    gate = asyncio.Semaphore(parallel)

    async def one() -> Sandbox:
        async with gate:
            return await backend.start(limits=IDLE_LIMITS)

    results = await asyncio.gather(*(one() for _ in range(n)), return_exceptions=True)
    boxes = [r for r in results if isinstance(r, Sandbox)]
    errors = [r for r in results if not isinstance(r, Sandbox)]
    if errors:
        await asyncio.gather(*(b.close() for b in boxes))
        raise RuntimeError(f"{len(errors)} of {n} sandboxes failed to start: {errors[0]!r}")
    return boxes


async def throughput(backend: Backend, sessions: int, seconds: float) -> float:
    boxes = await open_many(backend, sessions)
    steps = 0
    stop = time.perf_counter() + seconds

    async def loop(sb: Sandbox) -> None:
        nonlocal steps
        while time.perf_counter() < stop:
            await sb.exec(["true"])
            steps += 1

    try:
        t0 = time.perf_counter()
        await asyncio.gather(*(loop(b) for b in boxes))
        return steps / (time.perf_counter() - t0)
    finally:
        await asyncio.gather(*(b.close() for b in boxes))


def mem_available_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


async def idle_memory(backend: Backend, n: int) -> dict[str, float]:
    before = mem_available_mib()
    t0 = time.perf_counter()
    boxes = await open_many(backend, n)
    opened_s = time.perf_counter() - t0
    await asyncio.sleep(2)
    after = mem_available_mib()
    try:
        alive = sum(r.stdout == "ok\n" for r in await asyncio.gather(*(b.exec("echo ok") for b in boxes)))
    finally:
        await asyncio.gather(*(b.close() for b in boxes))
    return {"live": n, "answered": alive, "open_s": round(opened_s, 1),
            "idle_mib_per_sandbox": round((before - after) / n, 2)}


async def step_latency(backend: Backend, reps: int) -> dict[str, object]:
    """The step round trip of ``exec(["true"])`` next to a host spawn of ``true`` timed around it."""
    host = host_spawn_true(reps)
    async with backend.open() as sb:
        await sb.exec(["true"])
        steps = await timed(reps, lambda: sb.exec(["true"]))
    host_all = host + host_spawn_true(reps)
    return {
        "host_spawn_true": summary(host_all),
        "step_true": summary(steps),
        "step_ratio_p50": round(statistics.median(steps) / statistics.median(host_all), 2),
    }


async def bench_backend(name: str, quick: bool, steps_only: bool = False) -> dict[str, object]:
    backend = get_backend(name)
    await backend.check()
    result = await step_latency(backend, 50 if quick else 300)
    if steps_only:
        await backend.aclose()
        return result
    result |= {
        "cold_start": summary(await cold_start(backend, 5 if quick else 30)),
        "warm_acquire": summary(await warm_acquire(backend, 10 if quick else 100)),
        "steps_per_s_32": round(await throughput(backend, 8 if quick else 32, 3 if quick else 10), 1),
    }
    if not quick:
        result["steps_per_s_256"] = round(await throughput(backend, 256, 15), 1)
    result["idle_memory"] = await idle_memory(backend, 20 if quick else TARGET_LIVE[name])
    await backend.aclose()
    result["targets"] = targets(name, result, quick)
    return result


def targets(name: str, r: dict[str, object], quick: bool) -> dict[str, bool]:
    mem = r["idle_memory"]
    assert isinstance(mem, dict)
    acquire = r["warm_acquire"]
    assert isinstance(acquire, dict)
    out = {
        f"step_ratio<={TARGET_STEP_RATIO[name]}": r["step_ratio_p50"] <= TARGET_STEP_RATIO[name],  # type: ignore[operator]
        "warm_acquire_p50<=5ms": acquire["p50_ms"] <= 5.0,
    }
    if not quick:
        out[f"{TARGET_LIVE[name]}_live"] = mem["answered"] == TARGET_LIVE[name]
    return out


def leftover_containers() -> int:
    from envfarm.sandbox import dockerutil

    if not dockerutil.ping():
        return 0
    return len(dockerutil.client().api.containers(all=True, filters={"label": "envfarm=1"}))


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


async def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="docker,bwrap")
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke run of a minute or two")
    ap.add_argument("--steps-only", action="store_true", help="only the step latency (seconds, not minutes)")
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/sandbox.json, "
                    "bench/results/sandbox_live.json with --live-only)")
    sandbox_live.add_arguments(ap)
    args = ap.parse_args(argv)
    if args.live_only:
        return await sandbox_live.main(args, write)
    args.out = args.out or "bench/results/sandbox.json"
    report: dict[str, object] = {"quick": args.quick, "cpus": os.cpu_count(), "backends": {}}
    for name in args.backends.split(","):
        print(f"== {name}", file=sys.stderr)
        report["backends"][name] = await bench_backend(name, args.quick, args.steps_only)  # type: ignore[index]
    report["containers_left"] = leftover_containers()
    text = json.dumps(report, indent=2)
    print(text)
    await asyncio.to_thread(write, Path(args.out), text)
    return 0 if report["containers_left"] == 0 else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
