"""What the differential check costs: gold runs with the check off and on, alternated, on the built-in
CodeRepair tasks and a few mirrored SWE-bench rows.

    python bench/second_check.py                                     # every built-in task, 3 flask rows
    python bench/second_check.py --builtin 10 --rows pallets__flask-4992 --repo-source MIRRORS --repeats 3

Every repeat evaluates each instance once with ``differential`` off and once on (order alternating; canaries
off in both unless ``--canaries``, so the figures are the check's alone; images warm) and reads the
attempt's own timings from report.json: ``tests_s`` (the test command's wall time: the only place twins cost
anything, each twinned test runs once more per decoy), ``tests_cpu_s`` (the sandbox's CPU seconds meanwhile,
from its cgroup: what a busy machine does not inflate) and the whole attempt (sandbox start, copy, patches,
planting, tests, read-back). Grading on the host is part of none. The target: the check adds at most 25% to
test time. Gold must resolve with the check on, with its twins checked; a row that does not is reported and
fails the bench. Prints and writes JSON (``--out``, rewritten after every repeat).
A SWE-bench row needs its instance image or its repository: MIRRORS is a folder of ``<owner>__<repo>.git``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from envfarm.envs.code_repair.env import builtin_instances
from envfarm.harness import HarnessConfig, Instance, Prediction, evaluate, load_instances
from envfarm.testing.toyrepo import LITE

ROOT = Path(__file__).resolve().parents[1]
ROWS = ("pallets__flask-4045", "pallets__flask-4992", "pallets__flask-5063")
KEYS = ("tests_s", "tests_cpu_s", "attempt_s")


async def one_run(insts: list[Instance], source: Path | str | None, out: Path, run_id: str,
                  check: bool, canaries: bool) -> dict[str, dict[str, Any]]:
    preds = {i.instance_id: Prediction(i.instance_id, "gold", i.patch) for i in insts}
    cfg = HarnessConfig(run_id=run_id, report_dir=out, repo_source=source, max_workers=1, differential=check,
                        canaries=canaries, timeout_s=1800)
    run = await evaluate(insts, preds, cfg)
    found = {}
    for iid, rep in run.reports.items():
        if not rep.resolved or (check and not (rep.forgery_check and rep.forgery_check.passed)):
            why = rep.error or [f.describe() for f in rep.findings] or rep.forgery_check
            raise SystemExit(f"gold did not resolve {iid} (check {check}): {why}")
        timings = dict(rep.extra["timings"])
        attempt_s = rep.duration_s - timings.get("image_s", 0.0)
        twins = len(rep.forgery_check.twins) if rep.forgery_check else 0
        found[iid] = {"tests_s": timings["tests_s"], "tests_cpu_s": timings.get("tests_cpu_s", 0.0),
                      "attempt_s": attempt_s, "twins": twins}
    return found


def summarize(insts: list[Instance], samples: dict[str, dict[bool, list[dict[str, Any]]]],
              group: dict[str, str]) -> dict[str, Any]:
    per: dict[str, Any] = {}
    for inst in insts:
        s = samples[inst.instance_id]
        med = {c: {k: round(statistics.median(x[k] for x in s[c]), 3) for k in KEYS} for c in s if s[c]}
        if len(med) < 2:
            continue
        per[inst.instance_id] = {
            "set": group[inst.instance_id], "off": med[False], "on": med[True], "twins": s[True][0]["twins"],
            "tests_ratio": round(med[True]["tests_s"] / med[False]["tests_s"], 3),
            "cpu_ratio": round(med[True]["tests_cpu_s"] / max(med[False]["tests_cpu_s"], 1e-9), 3),
        }
    totals: dict[str, Any] = {}
    for name in [*sorted(set(group.values())), "all"]:
        rows = [r for r in per.values() if name in ("all", r["set"])]
        off = sum(r["off"]["tests_s"] for r in rows)
        on = sum(r["on"]["tests_s"] for r in rows)
        a_off = sum(r["off"]["attempt_s"] for r in rows)
        a_on = sum(r["on"]["attempt_s"] for r in rows)
        c_off = sum(r["off"]["tests_cpu_s"] for r in rows)
        c_on = sum(r["on"]["tests_cpu_s"] for r in rows)
        if not rows or not off:
            continue
        totals[name] = {"instances": len(rows), "tests_s_off": round(off, 2), "tests_s_on": round(on, 2),
                        "tests_ratio": round(on / off, 3), "tests_cpu_s_off": round(c_off, 2),
                        "tests_cpu_s_on": round(c_on, 2), "cpu_ratio": round(c_on / max(c_off, 1e-9), 3),
                        "attempt_s_off": round(a_off, 2),
                        "attempt_s_on": round(a_on, 2), "attempt_ratio": round(a_on / a_off, 3),
                        "median_tests_ratio": round(statistics.median(r["tests_ratio"] for r in rows), 3)}
    return {"totals": totals, "instances": per}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builtin", type=int, default=0, help="first N built-in tasks (0: all)")
    parser.add_argument("--rows", nargs="*", default=list(ROWS), help="SWE-bench Lite instance ids")
    parser.add_argument("--repo-source", help="folder of repository mirrors for the SWE-bench rows")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--canaries", action="store_true", help="canaries on in both configurations")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "second_check.json")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="envfarm-second-check-"))
    builtin, repos = builtin_instances()
    chosen = list(builtin[: args.builtin] if args.builtin else builtin)
    rows = load_instances(LITE / "test.parquet", args.rows) if args.rows else []
    sets = [("builtin", chosen, repos), ("swebench", rows, args.repo_source)]
    group = {i.instance_id: name for name, insts, _ in sets for i in insts}
    samples: dict[str, dict[bool, list[dict[str, Any]]]] = {iid: {False: [], True: []} for iid in group}
    for r in range(args.repeats):
        for check in ((False, True) if r % 2 == 0 else (True, False)):
            for name, insts, source in sets:
                if not insts:
                    continue
                run_id = f"{name}-r{r}-{int(check)}"
                found = asyncio.run(one_run(insts, source, work / "reports", run_id, check, args.canaries))
                for iid, t in found.items():
                    samples[iid][check].append(t)
                total = sum(t["tests_s"] for t in found.values())
                print(f"repeat {r} {name} check={check}: tests {total:.1f}s over {len(found)}", flush=True)
        result = {"measured": time.strftime("%Y-%m-%d"), "repeats": r + 1, "canaries": args.canaries,
                  "target_tests_ratio": 1.25,
                  **summarize([i for _, insts, _ in sets for i in insts], samples, group)}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")  # after every repeat
    print(json.dumps(result["totals"], indent=2))


if __name__ == "__main__":
    main()
