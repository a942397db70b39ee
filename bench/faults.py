"""The fault suites, many times each, under load of the kind that once lost trajectories; prints, writes JSON.

    python bench/faults.py                                   # 20 runs of each suite under load
    python bench/faults.py --repeats 3 --suites stop_paths   # a smoke run
    python bench/faults.py --no-load                         # the same runs on a quiet machine

The load runs beside the suites for the whole bench, in processes of its own: CPU busy loops, a disk writer
(64 MiB files, fsync'd, as image builds write), bwrap sandboxes opening and closing, and docker containers
(``network_mode=none``) created and removed. Each suite runs in a fresh pytest process per repeat; a run
fails on any failed test. The JSON has per suite the runs, failures (with the failing tests' ids), the
median and max seconds, and the load average seen. Target: 0 failures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUITES = {
    "farm_faults": ["tests/rollout/test_farm_faults.py"],  # sandboxes killed, hung; policy, learner down
    "stop_paths": ["tests/rollout/test_stop_paths.py"],  # every stop path, on a slow disk
    "node_loss": ["tests/rollout/test_ray_farm.py", "-k", "lost"],  # Ray nodes lost mid-run
}
LOADS = ("cpu", "cpu", "disk", "sandboxes", "docker")
DISK_CHUNK = 64 << 20


# ------------------------------------------------------------------------------------------------ load

def cpu_load() -> None:
    while True:
        sum(i * i for i in range(100_000))


def disk_load() -> None:
    block = os.urandom(1 << 20)
    with tempfile.TemporaryDirectory(prefix="envfarm-bench-disk-") as tmp:
        path = Path(tmp) / "blob"
        while True:
            with path.open("wb") as f:
                for _ in range(DISK_CHUNK // len(block)):
                    f.write(block)
                f.flush()
                os.fsync(f.fileno())
            path.unlink()


def sandbox_load() -> None:
    from envfarm.sandbox import get_backend

    async def churn() -> None:
        backend = get_backend("bwrap")
        try:
            while True:
                async with asyncio.TaskGroup() as tg:
                    for _ in range(4):
                        tg.create_task(one(backend))
        finally:
            await backend.aclose()

    async def one(backend: object) -> None:
        async with backend.open() as sb:  # type: ignore[attr-defined]
            await sb.exec(["sh", "-c", "head -c 4000000 /dev/urandom > big && rm big"], timeout_s=30)

    asyncio.run(churn())


def docker_load() -> None:
    import docker

    client = docker.from_env()
    while True:
        c = client.containers.run("envfarm/base:latest", ["true"], network_mode="none", detach=True)
        c.wait(timeout=60)
        c.remove(force=True)


WORKERS = {"cpu": cpu_load, "disk": disk_load, "sandboxes": sandbox_load, "docker": docker_load}


def start_load(kinds: tuple[str, ...]) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, __file__, "--load-worker", kind], start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for kind in kinds]


def stop_load(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


# ---------------------------------------------------------------------------------------------- suites

def run_suite(args: list[str], timeout_s: float) -> tuple[bool, float, list[str], str]:
    """One pytest process: (passed, seconds, failing test ids, last lines of its output)."""
    started = time.monotonic()
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf", *args]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
        text, ok = proc.stdout + proc.stderr, proc.returncode == 0
    except subprocess.TimeoutExpired as e:
        text, ok = f"timed out after {timeout_s:.0f}s\n{e.stdout or ''}", False
    failed = [line.split()[1] for line in text.splitlines() if line.startswith("FAILED ")]
    return ok, time.monotonic() - started, failed, "\n".join(text.splitlines()[-15:])


def bench(suites: list[str], repeats: int, timeout_s: float) -> dict[str, dict[str, object]]:
    results: dict[str, dict[str, object]] = {}
    for name in suites:
        seconds, failures, loads = [], [], []
        for i in range(repeats):
            ok, s, failed, tail = run_suite(SUITES[name], timeout_s)
            seconds.append(s)
            loads.append(os.getloadavg()[0])
            print(f"{name} {i + 1}/{repeats}: {'ok' if ok else 'FAILED'} in {s:.1f}s "
                  f"(load {loads[-1]:.1f})", flush=True)
            if not ok:
                failures.append({"run": i + 1, "tests": failed, "tail": tail})
                print(tail, flush=True)
        results[name] = {"command": "pytest " + " ".join(SUITES[name]), "runs": repeats,
                         "failed_runs": len(failures), "failures": failures,
                         "median_s": round(statistics.median(seconds), 1), "max_s": round(max(seconds), 1),
                         "load_avg_median": round(statistics.median(loads), 1),
                         "load_avg_max": round(max(loads), 1)}
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--suites", nargs="+", choices=sorted(SUITES), default=list(SUITES))
    ap.add_argument("--no-load", action="store_true", help="Run the suites without the load.")
    ap.add_argument("--timeout", type=float, default=900, help="Seconds per suite run.")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "faults.json")
    ap.add_argument("--load-worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.load_worker:
        WORKERS[a.load_worker]()
        return
    kinds = () if a.no_load else LOADS
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the load below is stopped too
    procs = start_load(kinds)
    started = time.time()
    try:
        time.sleep(5 if kinds else 0)  # let the load build up
        results = bench(a.suites, a.repeats, a.timeout)
    finally:
        stop_load(procs)
    data = {"date": time.strftime("%Y-%m-%d", time.gmtime(started)), "cores": os.cpu_count(),
            "load": list(kinds), "repeats": a.repeats, "suites": results,
            "failed_runs": sum(int(r["failed_runs"]) for r in results.values()),  # type: ignore[call-overload]
            "wall_s": round(time.time() - started, 1)}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(data, indent=2) + "\n")
    print(json.dumps({k: v for k, v in data.items() if k != "suites"}))
    for name, r in results.items():
        print(f"{name}: {r['failed_runs']} of {r['runs']} runs failed; median {r['median_s']}s")


if __name__ == "__main__":
    main()
