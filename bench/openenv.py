"""OpenEnv server benchmark: ToolCalc-v0 on bwrap served by ``envfarm envs serve`` to OpenEnv's own client,
against the same env stepped in-process by the farm; prints and writes JSON.

    python bench/openenv.py                              # 1, 64 and 512 concurrent sessions, 15 s per arm
    python bench/openenv.py --levels 1,64 --duration 10 --out bench/results/openenv.json

For each level N, two arms, each for ``--duration`` seconds of oracle episodes (reset, the 2 oracle steps):

- served: the real CLI server in its own process (``--max-sessions N --step-slots S --expose-oracle``) and N
  ``GenericEnvClient`` sessions on one asyncio loop in this process, each playing episodes back to back
  (``reset``, ``state`` for the oracle, then ``step``s). Step latency is the client's round trip of ``step``.
- farm: ``Farm`` with the oracle policy, ``concurrency=N``, in this process; step latency is the env's
  ``astep`` time (``Turn.env_s``), without any network.

Both arms bound the calculator commands running at once to ``S`` (4 per core, as bench/farm.py): 512
python3 starts at once on 2 cores would pass the tool's 5 s timeout and measure the overload. Errors are
client exceptions plus episodes whose oracle did not earn reward 1 (served) or that did not complete (farm).
Measured on a shared 2-core VM where client, server and sandboxes share the cores: read the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

# this file is named like the `openenv` package it benchmarks: keep its folder off the import path
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

ENV_ID = "envfarm/ToolCalc-v0"
STEP_SLOTS = 4 * (os.cpu_count() or 1)
ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _quantiles(latencies: list[float]) -> dict[str, float | None]:
    if not latencies:
        return {"p50_ms": None, "p99_ms": None}
    ordered = sorted(latencies)
    return {"p50_ms": round(1000 * statistics.median(ordered), 2),
            "p99_ms": round(1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 2)}


def start_server(sessions: int) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    argv = [sys.executable, "-m", "envfarm.cli", "openenv", "serve", "--env", ENV_ID, "--backend", "bwrap",
            "--port", str(port), "--max-sessions", str(sessions), "--warm", str(min(sessions, 32)),
            "--step-slots", str(STEP_SLOTS), "--expose-oracle"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {proc.stderr.read().decode() if proc.stderr else ''}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2):
                return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not answer /health within 120 s")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


async def _session(url: str, index: int, deadline: float, stats: dict[str, Any]) -> None:
    from openenv.core.generic_client import GenericEnvClient

    seed = index * 100_000
    while time.monotonic() < deadline:
        try:
            async with GenericEnvClient(base_url=url, message_timeout_s=120.0) as client:
                while time.monotonic() < deadline:
                    await client.reset(seed=seed)
                    seed += 1
                    result = None
                    for action in (await client.state())["oracle"]:
                        t0 = time.monotonic()
                        result = await client.step({"action": action})
                        stats["latencies"].append(time.monotonic() - t0)
                        if result.done:
                            break
                    stats["episodes"] += 1
                    if result is None or result.reward != 1.0:
                        stats["wrong"] += 1
        except Exception as e:  # counted, then the session reconnects
            stats["errors"] += 1
            stats["last_error"] = f"{type(e).__name__}: {e}"[:300]


async def served_arm(url: str, sessions: int, duration: float) -> dict[str, Any]:
    import importlib

    await asyncio.to_thread(importlib.import_module, "openenv.core.generic_client")
    stats: dict[str, Any] = {"latencies": [], "episodes": 0, "wrong": 0, "errors": 0, "last_error": None}
    t0 = time.monotonic()
    async with asyncio.TaskGroup() as tg:
        for i in range(sessions):
            tg.create_task(_session(url, i, t0 + duration, stats))
    wall = time.monotonic() - t0
    steps = len(stats["latencies"])
    return {"steps": steps, "steps_per_s": round(steps / wall, 1), **_quantiles(stats["latencies"]),
            "episodes": stats["episodes"], "errors": stats["errors"] + stats["wrong"],
            "last_error": stats["last_error"], "wall_s": round(wall, 1)}


async def farm_arm(sessions: int, duration: float) -> dict[str, Any]:
    import envfarm.envs  # noqa: F401 - registers the envs
    from envfarm.rollout import Farm, FarmConfig, make_policy

    config = FarmConfig(env_id=ENV_ID, episodes=1_000_000, concurrency=sessions, backend="bwrap",
                        step_slots=STEP_SLOTS, pool_size=min(sessions, 32))
    farm = Farm(config, make_policy("oracle"))
    latencies: list[float] = []
    episodes = bad = 0
    loop = asyncio.get_running_loop()
    timer = loop.call_later(duration, farm.stop)
    try:
        async for traj in farm.run():
            latencies.extend(t.env_s for t in traj.turns)
            episodes += 1
            bad += traj.status != "completed" or traj.reward != 1.0
    finally:
        timer.cancel()
    summary = farm.summary()
    return {"steps": len(latencies), "steps_per_s": summary.steps_per_s, **_quantiles(latencies),
            "episodes": episodes, "errors": bad + summary.infra_errors, "wall_s": round(summary.wall_s, 1)}


def run_level(sessions: int, duration: float) -> dict[str, Any]:
    proc, url = start_server(sessions)
    try:
        served = asyncio.run(served_arm(url, sessions, duration))
    finally:
        stop_server(proc)
    farm = asyncio.run(farm_arm(sessions, duration))
    ratio = served["steps_per_s"] / farm["steps_per_s"] if farm["steps_per_s"] else None
    return {"sessions": sessions, "served": served, "farm": farm,
            "served_vs_farm_steps": round(ratio, 3) if ratio else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="1,64,512", help="concurrent sessions, comma-separated")
    parser.add_argument("--duration", type=float, default=15.0, help="seconds per arm and level")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "openenv.json")
    args = parser.parse_args()
    results = []
    for level in (int(x) for x in args.levels.split(",")):
        result = run_level(level, args.duration)
        results.append(result)
        s, f = result["served"], result["farm"]
        print(f"{level:>4} sessions  served {s['steps_per_s']:>7} steps/s  p50 {s['p50_ms']} ms  "
              f"p99 {s['p99_ms']} ms  errors {s['errors']}   |   farm {f['steps_per_s']:>7} steps/s  "
              f"p50 {f['p50_ms']} ms  p99 {f['p99_ms']} ms  errors {f['errors']}", flush=True)
    report = {"env_id": ENV_ID, "backend": "bwrap", "step_slots": STEP_SLOTS, "cpus": os.cpu_count(),
              "duration_s": args.duration, "levels": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
