"""What canary tests cost: the gold run of each instance with canaries off and on, alternated, in one run.

    python bench/canary.py                                 # the toy repo (envfarm/testing/toyrepo.py)
    python bench/canary.py --instances ../shared/data/swe-bench-lite/test.parquet \\
        --instance-ids pallets__flask-4992 sympy__sympy-24152 --repo-source MIRRORS --repeats 3

Every repeat runs each instance once without and once with canaries (order alternating, images warm), and
reads the attempt's own timings from report.json: ``tests_s`` (the test command) and the whole attempt
(sandbox start, copy, patch, test_patch, canary planting, tests, read-back). Grading on the host is timed
separately (``grade_s``: swebench's parser plus the canary and completeness checks). The target is < 5% of
test time.
Prints and writes JSON (``--out``). MIRRORS is the folder of repository mirrors (``<owner>__<repo>.git``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from envfarm.harness import HarnessConfig, Instance, Prediction, evaluate, load_instances
from envfarm.harness.instances import instance_from_row
from envfarm.testing import toyrepo

ROOT = Path(__file__).resolve().parents[1]


def toy_setup(work: Path) -> tuple[list[Instance], Path, tuple[Path, ...]]:
    _, base = toyrepo.make_repo(work / "src")
    specs = toyrepo.write_spec(work / "specs").parent
    return [instance_from_row(toyrepo.row(f"{toyrepo.KEY}-canary", base))], work / "src", (specs,)


async def one_run(insts: list[Instance], source: Path, specs: tuple[Path, ...], out: Path, run_id: str,
                  canaries: bool) -> dict[str, dict[str, float]]:
    preds = {i.instance_id: Prediction(i.instance_id, "gold", i.patch) for i in insts}
    cfg = HarnessConfig(run_id=run_id, report_dir=out, repo_source=source, specs=specs, max_workers=1,
                        canaries=canaries, timeout_s=1800)
    run = await evaluate(insts, preds, cfg)
    found = {}
    for iid, rep in run.reports.items():
        if not rep.resolved:
            raise SystemExit(f"gold did not resolve {iid} (canaries {canaries}): {rep.error or rep.findings}")
        timings = dict(rep.extra["timings"])
        attempt_s = rep.duration_s - timings.get("image_s", 0.0)
        found[iid] = {"tests_s": timings["tests_s"], "attempt_s": attempt_s}
    return found


def grade_time(folder: Path, inst: Instance, canaries: bool) -> float:
    """Seconds to grade one saved log on the host (median of 5)."""
    from envfarm.harness import grade
    from envfarm.harness.canary import Canary

    report = json.loads(next(folder.rglob(f"{inst.instance_id}/report.json")).read_text())
    planted = report[inst.instance_id]["envfarm"].get("canaries") or []
    log = next(folder.rglob(f"{inst.instance_id}/test_output.txt"))
    times = []
    for _ in range(5):
        t = time.perf_counter()
        checked = [Canary(**c) for c in planted] if canaries else None
        grade(inst, log, model_patch=inst.patch, canaries=checked)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=Path, help="SWE-bench instances file (default: the toy repo)")
    parser.add_argument("--instance-ids", nargs="*", default=[])
    parser.add_argument("--repo-source", type=Path)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "canary.json")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="envfarm-canary-bench-"))
    if args.instances:
        insts = load_instances(args.instances, args.instance_ids or None)
        source, specs = args.repo_source, ()
    else:
        insts, source, specs = toy_setup(work)
    samples: dict[str, dict[bool, list[dict[str, float]]]] = {
        i.instance_id: {False: [], True: []} for i in insts
    }
    for r in range(args.repeats):
        for canaries in ((False, True) if r % 2 == 0 else (True, False)):
            run_id = f"r{r}-{int(canaries)}"
            found = asyncio.run(one_run(insts, source, specs, work / "reports", run_id, canaries))
            for iid, t in found.items():
                samples[iid][canaries].append(t)
            print(f"repeat {r} canaries={canaries}: {found}", flush=True)
    result = {"repeats": args.repeats, "instances": {}}
    for inst in insts:
        per = samples[inst.instance_id]
        med = {c: {k: statistics.median(s[k] for s in per[c]) for k in ("tests_s", "attempt_s")} for c in per}
        g_off, g_on = (grade_time(work / "reports", inst, c) for c in (False, True))
        result["instances"][inst.instance_id] = {
            "off": med[False], "on": med[True], "grade_s": {"off": round(g_off, 4), "on": round(g_on, 4)},
            "tests_ratio": round(med[True]["tests_s"] / med[False]["tests_s"], 3),
            "attempt_ratio": round(med[True]["attempt_s"] / med[False]["attempt_s"], 3),
            "extra_s_per_instance": round(med[True]["attempt_s"] - med[False]["attempt_s"] + g_on - g_off, 3),
        }
    print(json.dumps(result, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
