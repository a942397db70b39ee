"""Harness benchmark: per-instance wall time against running the same tests directly on the host.

    python bench/harness.py                      # the toy repo (envfarm/testing/toyrepo.py), 4 instances
    python bench/harness.py --instances 8 --out bench/results/harness.json
    python bench/harness.py --flask-mirror DIR   # also the three SWE-bench Lite flask rows (harness only)

For each instance the host baseline checks the base commit out into a temp folder, applies the gold patch
and test_patch with ``git apply`` and runs the same test command with this interpreter's pytest. The
harness runs each instance in its own ``evaluate()`` call, one after the other: ``cold`` with
``force_rebuild`` (env and instance images built without docker's layer cache, every time; the wheelhouse
download is cached on disk and not counted) and ``cached`` (images found by hash: one sandbox start, repo
copy, patch, tamper check, tests, grading). Each is split into image time, test time and the rest
(overhead). ``parallel_cached`` runs all instances in one call with ``max_workers=4`` (throughput). The
machine is shared: ratios are measured within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from envfarm.harness import HarnessConfig, Instance, Prediction, RunReport, evaluate, load_instances
from envfarm.harness.instances import instance_from_row
from envfarm.harness.repos import snapshot
from envfarm.testing import toyrepo

ROOT = Path(__file__).resolve().parents[1]

FLASK = ("pallets__flask-4045", "pallets__flask-4992", "pallets__flask-5063")


def stats(xs: list[float]) -> dict[str, float]:
    return {"median_s": round(statistics.median(xs), 3), "max_s": round(max(xs), 3), "n": len(xs)}


def host_baseline(source: Path, inst: Instance, work: Path) -> float:
    """Seconds to check out, patch and run the instance's tests on the host (no container)."""
    t = time.perf_counter()
    repo = work / inst.instance_id
    snapshot(toyrepo_source(source), inst.base_commit, repo)
    for patch in (inst.patch, inst.test_patch):
        subprocess.run(["git", "apply", "-"], cwd=repo, input=patch.encode(), check=True)
    env = {**os.environ, "PYTHONPATH": str(repo), "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "tests/test_ops.py"]
    res = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"host baseline failed for {inst.instance_id}:\n{res.stdout[-2000:]}")
    return time.perf_counter() - t


def toyrepo_source(source: Path) -> Path:
    return source / toyrepo.KEY


async def harness_run(insts: list[Instance], config: HarnessConfig) -> tuple[RunReport, float]:
    preds = {i.instance_id: Prediction(i.instance_id, "gold", i.patch) for i in insts}
    t = time.perf_counter()
    run = await evaluate(insts, preds, config)
    wall = time.perf_counter() - t
    bad = [i for i, r in run.reports.items() if not r.resolved]
    if bad:
        raise SystemExit(f"gold not resolved for {bad}: see {run.summary_path}")
    return run, wall


def per_instance(run: RunReport) -> list[float]:
    return [r.duration_s for r in run.reports.values()]


async def one_by_one(
    insts: list[Instance], make: Callable[[str, int, bool], HarnessConfig], run_id: str, force: bool
) -> list[dict[str, float]]:
    """Each instance in its own evaluate() call, one after the other: clean per-instance times."""
    out = []
    for inst in insts:
        run, wall = await harness_run([inst], make(f"{run_id}-{inst.instance_id}", 1, force))
        timings = run.reports[inst.instance_id].extra["timings"]
        out.append({"wall_s": round(wall, 3), **{k: float(v) for k, v in timings.items()}})
    return out


def split(rows: list[dict[str, float]]) -> dict[str, object]:
    return {
        "wall": stats([r["wall_s"] for r in rows]),
        "image_s": stats([r["image_s"] for r in rows]),
        "tests_s": stats([r["tests_s"] for r in rows]),
        "overhead_s": stats([r["wall_s"] - r["image_s"] - r["tests_s"] for r in rows]),
    }


async def bench_toy(n: int, tmp: Path) -> dict[str, object]:
    source = tmp / "src"
    _, base = await asyncio.to_thread(toyrepo.make_repo, source)  # git runs: off the event loop
    specs = toyrepo.write_spec(tmp / "specs")
    insts = [instance_from_row(toyrepo.row(f"bench__calc-{k}", base)) for k in range(n)]
    host = [await asyncio.to_thread(host_baseline, source, i, tmp / "host") for i in insts]

    def cfg(run_id: str, workers: int, force: bool) -> HarnessConfig:
        return HarnessConfig(
            run_id=run_id,
            report_dir=tmp / "reports",
            repo_source=source,
            specs=(specs,),
            max_workers=workers,
            timeout_s=120,
            force_rebuild=force,
        )

    cold = await one_by_one(insts, cfg, "cold", True)
    cached = await one_by_one(insts, cfg, "cached", False)
    _, par_wall = await harness_run(insts, cfg("parallel", 4, False))
    host_med = statistics.median(host)
    return {
        "instances": n,
        "host": stats(host),
        "cold": split(cold),
        "cached": split(cached),
        "parallel_cached": {
            "max_workers": 4,
            "wall_s": round(par_wall, 2),
            "per_instance_s": round(par_wall / n, 3),
        },
        "ratio_cached_vs_host": round(statistics.median(r["wall_s"] for r in cached) / host_med, 2),
        "ratio_cold_vs_host": round(statistics.median(r["wall_s"] for r in cold) / host_med, 2),
    }


async def bench_flask(mirror: Path, lite: Path, tmp: Path) -> dict[str, object]:
    insts = await asyncio.to_thread(load_instances, lite, list(FLASK))

    def cfg(run_id: str, workers: int, force: bool) -> HarnessConfig:
        return HarnessConfig(
            run_id=run_id,
            report_dir=tmp / "flask",
            repo_source=mirror,
            max_workers=workers,
            force_rebuild=force,
        )

    cold = await one_by_one(insts, cfg, "cold", True)
    cached = await one_by_one(insts, cfg, "cached", False)
    return {i.instance_id: {"cold": c, "cached": k} for i, c, k in zip(insts, cold, cached, strict=True)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--instances", type=int, default=4, help="toy instances per run")
    parser.add_argument("--flask-mirror", type=Path, help="folder holding pallets__flask(.git)")
    parser.add_argument("--lite", type=Path, default=toyrepo.LITE / "test.parquet")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "harness.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="envfarm-bench-") as tmp:
        result: dict[str, object] = {"toy": asyncio.run(bench_toy(args.instances, Path(tmp)))}
        if args.flask_mirror:
            result["flask"] = asyncio.run(bench_flask(args.flask_mirror, args.lite, Path(tmp)))
    result["machine"] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    print(json.dumps(result, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
