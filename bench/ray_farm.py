"""Ray farm benchmark: episodes/s of the one-machine Farm vs RayFarm over a local two-node Ray cluster.

    python bench/ray_farm.py                        # 400 ToolCalc episodes (oracle, bwrap) per arm, 2 rounds
    python bench/ray_farm.py --episodes 200 --repeat 1 --out bench/results/ray_farm.json

Both arms play the same episodes with the same concurrency and step slots (per node for Ray) on bwrap, and
write the spool (fsync'd) and a JSONL sink on the driver. The cluster is ``ray.cluster_utils.Cluster``: a head
and a second node on this machine, each bound to 127.0.0.1 with one CPU, 100 MB of object store, no dashboard
and no usage stats. The arms alternate so a noisy neighbour hits both. Each arm is timed from its first
episode's start to its last trajectory (the Ray workers' setup, like the one-machine pool fill, is not
timed; it is reported as ``setup_s``).

On one machine the two nodes share its cores, so this measures the cost of the Ray path (an actor call per
episode, Trajectory JSON back to the driver), not a speed-up: a real second machine adds its cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import envfarm.envs  # noqa: F401 - registers the envs
from envfarm.rollout import Farm, FarmConfig, FileSink, make_policy
from envfarm.rollout.ray_farm import RayConfig, RayFarm

ENV_ID = "envfarm/ToolCalc-v0"
NODE = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "object_store_memory": 100 * 2**20}


async def arm(name: str, farm: Farm) -> dict[str, Any]:
    t0 = time.monotonic()
    started: list[float] = []
    ok, last = 0, 0.0
    async for t in farm.run():
        started.append(t.started_at)
        last = time.time()
        ok += t.status == "completed" and t.reward == 1.0
    n = len(started)
    wall = last - min(started)
    s = farm.summary()
    return {"arm": name, "episodes": n, "ok": ok, "wall_s": round(wall, 2),
            "setup_s": round(time.monotonic() - t0 - wall, 2), "episodes_per_s": round(n / wall, 1),
            "steps_per_s": round(s.steps / wall, 1), "nodes_used": s.nodes_used,
            "per_node": {k: v["episodes"] for k, v in s.nodes.items()}}


async def rounds(address: str, args: argparse.Namespace, tmp: Path) -> dict[str, list[dict[str, Any]]]:
    config = FarmConfig(env_id=ENV_ID, episodes=args.episodes, concurrency=args.concurrency, backend="bwrap",
                        step_slots=args.step_slots)
    runs: dict[str, list[dict[str, Any]]] = {"single": [], "ray": []}
    for i in range(args.repeat):
        for name in ("single", "ray") if i % 2 == 0 else ("ray", "single"):
            run = tmp / f"{name}-{i}"
            kw: dict[str, Any] = {"run_dir": run / "run", "sinks": [FileSink(run / "out.jsonl")]}
            farm = (Farm(config, make_policy("oracle"), **kw) if name == "single" else
                    RayFarm(config, make_policy("oracle"), RayConfig(address), **kw))
            res = await arm(name, farm)
            print(f"  {json.dumps(res)}", flush=True)
            runs[name].append(res)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--step-slots", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "ray_farm.json")
    args = parser.parse_args()
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    from ray.cluster_utils import Cluster

    result: dict[str, Any] = {"cpus": os.cpu_count(), "episodes": args.episodes,
                              "concurrency": args.concurrency, "step_slots": args.step_slots,
                              "load_avg_at_start": os.getloadavg()}
    cluster = Cluster(initialize_head=True, head_node_args={**NODE, "include_dashboard": False})
    try:
        cluster.add_node(**NODE)
        cluster.wait_for_nodes()
        with tempfile.TemporaryDirectory(prefix="envfarm-bench-") as tmp:
            runs = asyncio.run(rounds(cluster.address, args, Path(tmp)))
    finally:
        cluster.shutdown()
    for name, arms in runs.items():
        result[f"{name}_episodes_per_s"] = statistics.median(a["episodes_per_s"] for a in arms)
    result["all_ok"] = all(a["ok"] == args.episodes for arms in runs.values() for a in arms)
    result["load_avg_at_end"] = os.getloadavg()
    result["runs"] = runs
    text = json.dumps(result, indent=2)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
