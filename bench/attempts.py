"""Groups from one state: the wall time of k attempts per task against one; prints and writes JSON.

    python bench/attempts.py                          # CodeRepair, oracle, 4 tasks, bwrap: k=1 and k=8
    python bench/attempts.py --tasks 2 --out /tmp/attempts.json

The run of ``envfarm eval --env envfarm/CodeRepair-v0 --policy oracle --num-tasks 4 --backend bwrap
--attempts K``, in one process, after a warm-up run (images built, the layer store and page cache warm), for
K=1 and K=8 with the attempts of a task forked from its prepared env (the farm's default; attempts that submit
the same patch share its grading), K=8 forked but each attempt graded on its own (``share_grades=False``),
and K=8 with every attempt reset on its own (``FarmConfig.fork_groups=False``, the old way) for reference,
each ``--rounds`` times in turn; a configuration's wall time is its fastest round (the machine is shared: a
slow round is other load). Target: K=8 within 4x the wall time of K=1. Each attempt's time is split into
preparing (the reset, or the wait for the task's prepared env and the fork of it), acting (the policy and the
steps before the last) and grading (the last step: submit runs the hidden tests); sums over the run's attempts
and per-attempt medians.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from envfarm.rollout import FarmConfig, RunDir, make_policy
from envfarm.rollout.eval import run_eval
from envfarm.sandbox import DEFAULT_BACKEND

ENV_ID = "envfarm/CodeRepair-v0"
TARGET_RATIO = 4.0


def split(t: Any) -> dict[str, float]:
    """An attempt's preparing, acting and grading seconds."""
    tm = t.timings
    return {"preparing_s": tm.sandbox_s, "acting_s": tm.policy_s + tm.queue_s + tm.env_s - tm.grade_s,
            "grading_s": tm.grade_s}


async def one_run(args: argparse.Namespace, folder: Path, attempts: int, fork_groups: bool,
                  share_grades: bool = True) -> dict[str, Any]:
    config = FarmConfig(env_id=ENV_ID, episodes=args.tasks * attempts, attempts=attempts,
                        backend=args.backend, concurrency=args.concurrency, fork_groups=fork_groups,
                        env_kwargs={"share_grades": share_grades})
    t0 = time.monotonic()
    report = await run_eval(config, make_policy("oracle"), folder)
    wall = time.monotonic() - t0
    trajs = await (await RunDir.load(folder)).finished()
    parts = [split(t) for t in trajs]
    keys = ("preparing_s", "acting_s", "grading_s")
    return {
        "attempts": attempts, "fork_groups": fork_groups, "share_grades": share_grades,
        "episodes": len(trajs), "wall_s": round(wall, 3),
        "pass_at_1": report.metrics["pass@1"].value, "infra_errors": report.infra_errors,
        "sum": {k: round(sum(p[k] for p in parts), 3) for k in keys},
        "median": {k: round(statistics.median(p[k] for p in parts), 3) for k in keys},
    }


def show(name: str, run: dict[str, Any]) -> None:
    s, m = run["sum"], run["median"]
    print(f"{name:>9}: {run['wall_s']:6.1f} s wall, {run['episodes']} attempts, pass@1 {run['pass_at_1']:.2f}"
          f"; sums prepare {s['preparing_s']:.1f} / act {s['acting_s']:.1f} / grade {s['grading_s']:.1f} s;"
          f" medians {m['preparing_s']:.2f} / {m['acting_s']:.2f} / {m['grading_s']:.2f} s", flush=True)


async def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--attempts", type=int, default=8)
    ap.add_argument("--backend", default=DEFAULT_BACKEND)
    ap.add_argument("--concurrency", type=int, default=FarmConfig.concurrency)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-independent", action="store_true", help="Skip the reference run without forks.")
    ap.add_argument("--out", default="bench/results/attempts.json")
    args = ap.parse_args(argv)
    runs: dict[str, dict[str, Any]] = {}
    walls: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="envfarm-attempts-") as tmp:
        root = Path(tmp)
        show("warm-up", await one_run(args, root / "warm", 1, True))
        k = args.attempts
        plan = [("k1", 1, True, True), (f"k{k}", k, True, True), (f"k{k}_own_grading", k, True, False)]
        if not args.no_independent:
            plan.append((f"k{k}_reset", k, False, False))
        for r in range(args.rounds):
            for name, n, fork, share in plan:
                run = await one_run(args, root / f"{name}-{r}", n, fork, share)
                show(name, run)
                walls.setdefault(name, []).append(run["wall_s"])
                if name not in runs or run["wall_s"] < runs[name]["wall_s"]:
                    runs[name] = run
    for name, run in runs.items():
        run["walls_s"] = walls[name]
    k1, kg = runs["k1"], runs[f"k{args.attempts}"]
    ratio = kg["wall_s"] / k1["wall_s"]
    report: dict[str, Any] = {
        "date": datetime.date.today().isoformat(), "cpus": os.cpu_count(), "env_id": ENV_ID,
        "policy": "oracle", "backend": args.backend, "tasks": args.tasks, "concurrency": args.concurrency,
        "rounds": args.rounds,
        "load_avg_1m": round(os.getloadavg()[0], 1), "runs": runs, "ratio": round(ratio, 2),
        "target_ratio": TARGET_RATIO, "meets_target": ratio <= TARGET_RATIO,
    }
    if f"k{args.attempts}_reset" in runs:
        report["ratio_without_forks"] = round(runs[f"k{args.attempts}_reset"]["wall_s"] / k1["wall_s"], 2)
    without = report.get("ratio_without_forks")
    print(f"k={args.attempts} / k=1 wall: {ratio:.2f}x (target <= {TARGET_RATIO:g}x)"
          + (f"; without forks {without:.2f}x" if without is not None else ""))
    out = Path(args.out)
    await asyncio.to_thread(out.parent.mkdir, parents=True, exist_ok=True)
    await asyncio.to_thread(out.write_text, json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
