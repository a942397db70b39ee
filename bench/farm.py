"""Rollout farm benchmark: oracle policy on ToolCalc, all episodes in flight at once; prints and writes JSON.

    python bench/farm.py                         # 1,000 concurrent episodes on bwrap, 200 on docker
    python bench/farm.py --quick                 # 100 / 20, a smoke run
    python bench/farm.py --backends bwrap --repeat 3 --out bench/results/farm.json

Each backend runs two arms on identical sandbox pools (``size`` = ``max_live`` = the concurrency, filled
before the clock starts), alternating ``--repeat`` times so that a noisy neighbour hits both:

- raw: the sandbox work of an oracle ToolCalc episode and nothing else: lease a warm sandbox, write the
  calculator, run it on the task's expression; counted as the episode's 2 steps.
- farm: ``Farm`` with the oracle policy, the spool (fsync'd) and a JSONL sink: env parsing and validation,
  trajectories, delivery.

In both arms at most ``STEP_SLOTS`` (4 per core) calculator commands run at once: 1,000 python3 processes
started together on 2 cores would each need ~15 s of wall time and pass the tool's 5 s timeout (plus the
agent's 10 s grace), which measures the overload, not the farm. The episodes stay in flight all the same.

Overhead is ``1 - farm steps/s / raw steps/s`` (medians; target <= 10%). Memory per live episode: the peak
of the memory charged to this process's sandbox cgroups (the sandbox and everything running in it), divided
by the episodes in flight at that moment, plus the farm process's own RSS growth per episode (trajectories,
envs, tasks). Both are read from this process's cgroups and /proc, so neighbours on a shared machine do not
count. Measured on a shared 2-core VM: read the ratios, not the absolutes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import gymnasium

import envfarm.envs  # noqa: F401 - registers the envs
from envfarm.envs.tool_use.toolcalc import CALC_PATH, CALC_SOURCE, ToolCalcEnv
from envfarm.rollout import Farm, FarmConfig, FileSink, make_policy
from envfarm.sandbox import get_backend
from envfarm.sandbox.pool import SandboxPool

ENV_ID = "envfarm/ToolCalc-v0"
CONCURRENCY = {"bwrap": 1000, "docker": 200}
QUICK = {"bwrap": 100, "docker": 20}
STEP_SLOTS = 4 * (os.cpu_count() or 1)  # ToolCalc's calc is a CPU-bound python3 start: bound it in both arms
CALC_TIMEOUT_S = 5  # as ToolCalc's calc tool
TARGET_OVERHEAD = 0.10


def expressions(n: int) -> list[str]:
    """The calculator expression of the tasks of seeds 0..n-1 (what the oracle sends)."""
    env = gymnasium.make(ENV_ID, backend="bwrap").unwrapped
    assert isinstance(env, ToolCalcEnv)
    out = []
    for seed in range(n):
        gymnasium.Env.reset(env, seed=seed)
        out.append(env.generate(env.np_random).problem.expression)
    return out


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def sandbox_cgroups(backend: str) -> list[Path]:
    """Memory-usage files of the cgroups of this process's live sandboxes (cgroup v1 or v2). Blocking."""
    root, pid = Path("/sys/fs/cgroup"), os.getpid()
    v2 = (root / "cgroup.controllers").exists()
    if backend == "bwrap":
        return list((root if v2 else root / "memory").glob(f"envfarm/{pid}-*/memory." +
                                                           ("current" if v2 else "usage_in_bytes")))
    from envfarm.sandbox import dockerutil

    ids = [c["Id"] for c in dockerutil.client().api.containers(filters={"label": f"envfarm.owner_pid={pid}"})]
    if v2:
        return [root / "system.slice" / f"docker-{i}.scope" / "memory.current" for i in ids]
    return [root / "memory" / "docker" / i / "memory.usage_in_bytes" for i in ids]


def sandbox_memory_mib(backend: str) -> float:
    total = 0
    for f in sandbox_cgroups(backend):
        try:
            total += int(f.read_text())
        except (OSError, ValueError):  # the sandbox went away meanwhile
            pass
    return total / (1 << 20)


class Sampler:
    """Samples the sandboxes' memory and this process's RSS while episodes run."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.active = 0
        self.max_active = 0
        self.at_peak = (0, 0.0)
        """(episodes in flight, sandbox MiB) at the sample with the most episodes in flight."""
        self.max_rss = 0.0

    @property
    def per_live(self) -> float:
        live, mem = self.at_peak
        return mem / live if live else 0.0

    async def run(self) -> None:
        while True:
            active = self.active
            if active and active >= self.at_peak[0]:
                mem = await asyncio.to_thread(sandbox_memory_mib, self.backend)
                self.at_peak = max(self.at_peak, (active, mem))
            self.max_rss = max(self.max_rss, rss_mib())
            await asyncio.sleep(0.25)


async def raw_arm(backend_name: str, exprs: list[str]) -> dict[str, Any]:
    n = len(exprs)
    backend = get_backend(backend_name)
    limits, image = ToolCalcEnv.default_limits, ToolCalcEnv.default_image
    rss0, sampler = rss_mib(), Sampler(backend_name)
    try:
        async with SandboxPool(backend, image, limits, size=n, max_live=n) as pool:  # as the farm's
            await pool.wait_filled()
            pool.size = 0  # every episode starts now: no refill, as the farm does after its last episode
            ok = 0
            slots = asyncio.Semaphore(STEP_SLOTS)

            async def one(expr: str) -> None:
                nonlocal ok
                sampler.active += 1
                sampler.max_active = max(sampler.max_active, sampler.active)
                try:
                    async with pool.lease() as sb:
                        await sb.write_file(CALC_PATH, CALC_SOURCE)
                        async with slots:
                            res = await sb.exec(["python3", CALC_PATH, expr], timeout_s=CALC_TIMEOUT_S)
                        ok += res.exit_code == 0 and not res.timed_out
                finally:
                    sampler.active -= 1

            watch = asyncio.create_task(sampler.run())
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                await asyncio.gather(*(one(e) for e in exprs))
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            finally:
                watch.cancel()
                await asyncio.wait([watch])
    finally:
        await backend.aclose()
    return _arm("raw", n, ok, wall, cpu, rss0, sampler)


async def farm_arm(backend_name: str, n: int, workdir: Path) -> dict[str, Any]:
    config = FarmConfig(env_id=ENV_ID, episodes=n, concurrency=n, backend=backend_name, pool_size=n,
                        max_live=n, prefill=True, step_slots=STEP_SLOTS)
    run = Path(tempfile.mkdtemp(dir=workdir))
    farm = Farm(config, make_policy("oracle"), run_dir=run / "run", sinks=[FileSink(run / "out.jsonl")])
    rss0, sampler = rss_mib(), Sampler(backend_name)

    cpu_start: list[float] = []

    async def track() -> None:
        while True:
            sampler.active = farm.live.active
            sampler.max_active = max(sampler.max_active, farm.live.active)
            if sampler.active and not cpu_start:
                cpu_start.append(time.process_time())  # the pool is full and the first episodes started
            await asyncio.sleep(0.01)

    watch = [asyncio.create_task(sampler.run()), asyncio.create_task(track())]
    started: list[float] = []
    ok, last, cpu_last = 0, 0.0, 0.0
    try:
        async for t in farm.run():
            started.append(t.started_at)
            last, cpu_last = time.time(), time.process_time()
            ok += t.status == "completed" and t.reward == 1.0
    finally:
        for task in watch:
            task.cancel()
        await asyncio.wait(watch)
    wall = last - min(started)  # first episode start to last trajectory: the pool fill is not timed
    out = _arm("farm", n, ok, wall, cpu_last - cpu_start[0], rss0, sampler)
    s = farm.summary()
    out.update(infra_errors=s.infra_errors, max_concurrent=s.max_concurrent, time_split=s.time_split,
               spool_lines=sum(1 for _ in (run / "run" / "spool.jsonl").open()))
    return out


def _arm(name: str, n: int, ok: int, wall: float, cpu: float, rss0: float, s: Sampler) -> dict[str, Any]:
    return {"arm": name, "episodes": n, "ok": ok, "wall_s": round(wall, 2),
            "process_cpu_ms_per_episode": round(cpu * 1000 / n, 2),
            "steps_per_s": round(2 * n / wall, 1), "episodes_per_s": round(n / wall, 1),
            "max_in_flight": s.max_active, "sandbox_mib_per_live_episode": round(s.per_live, 2),
            "process_rss_kib_per_episode": round((s.max_rss - rss0) * 1024 / max(s.max_active, 1), 1)}


async def bench_backend(name: str, n: int, repeat: int, workdir: Path) -> dict[str, Any]:
    await get_backend(name).check()
    exprs = expressions(n)
    arms: dict[str, list[dict[str, Any]]] = {"raw": [], "farm": []}
    for i in range(repeat):
        for arm in ("raw", "farm") if i % 2 == 0 else ("farm", "raw"):
            res = await (raw_arm(name, exprs) if arm == "raw" else farm_arm(name, n, workdir))
            print(f"  {name} {arm}: {json.dumps(res)}", flush=True)
            arms[arm].append(res)
    raw = statistics.median(a["steps_per_s"] for a in arms["raw"])
    farm = statistics.median(a["steps_per_s"] for a in arms["farm"])
    overhead = 1 - farm / raw
    def med(arm: str, key: str) -> float:
        return statistics.median(a[key] for a in arms[arm])

    return {"concurrency": n, "raw_steps_per_s": raw, "farm_steps_per_s": farm,
            "overhead": round(overhead, 4),
            "raw_cpu_ms_per_episode": med("raw", "process_cpu_ms_per_episode"),
            "farm_cpu_ms_per_episode": med("farm", "process_cpu_ms_per_episode"),
            "sandbox_mib_per_live_episode": med("farm", "sandbox_mib_per_live_episode"),
            "farm_rss_kib_per_episode": med("farm", "process_rss_kib_per_episode"),
            "raw_rss_kib_per_episode": med("raw", "process_rss_kib_per_episode"),
            "all_ok": all(a["ok"] == n for a in arms["raw"] + arms["farm"]),
            "targets": {f"overhead<={TARGET_OVERHEAD:.0%}": overhead <= TARGET_OVERHEAD,
                        f"{n}_concurrent": all(a["max_concurrent"] == n for a in arms["farm"])},
            "runs": arms}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="bwrap,docker")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "farm.json")
    args = parser.parse_args()
    sizes = QUICK if args.quick else CONCURRENCY
    result: dict[str, Any] = {"quick": args.quick, "cpus": os.cpu_count(), "repeat": args.repeat,
                              "load_avg_at_start": os.getloadavg(), "backends": {}}
    with tempfile.TemporaryDirectory(prefix="envfarm-bench-") as tmp:
        for name in args.backends.split(","):
            print(f"{name}: {sizes[name]} concurrent episodes x {args.repeat}", flush=True)
            result["backends"][name] = await bench_backend(name, sizes[name], args.repeat, Path(tmp))
    result["load_avg_at_end"] = os.getloadavg()
    text = json.dumps(result, indent=2)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    failed = [f"{b}: {k}" for b, r in result["backends"].items() for k, ok in r["targets"].items() if not ok]
    if failed:
        print(f"targets missed: {failed}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
