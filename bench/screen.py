"""Static screening (harness/screen.py): false positives on gold patches, true positives on the forgery suite.

    python bench/screen.py [--json bench/results/screen.json] [--tasks FILE ...]

Gold: every row of SWE-bench Lite (dev + test) and Verified, the built-in code-repair tasks, and any mined
task file given with --tasks (or found in a catalogue folder). Screening reads only the patch text, so no
repository or image is needed. Forgeries: every exploit of ``envfarm.testing.exploits`` for each runner
(pytest, sympy, django), rendered as real diffs against a built-in row's repository. Prints and writes JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections import Counter
from pathlib import Path

from envfarm.harness import load_instances
from envfarm.harness.grading import screen_context as context
from envfarm.harness.instances import Instance
from envfarm.harness.screen import Suspicion, screen_patch

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
DATASETS = {
    "swe-bench-lite": ("dev.parquet", "test.parquet"),
    "swe-bench-verified": ("test.parquet",),
}


def gold_rows(tasks: list[Path]) -> dict[str, list[Instance]]:
    out: dict[str, list[Instance]] = {}
    for name, files in DATASETS.items():
        rows = [r for f in files if (DATA / name / f).is_file() for r in load_instances(DATA / name / f)]
        if rows:
            out[name] = rows
    from envfarm.envs.code_repair.env import builtin_instances

    out["code-repair-builtin"] = list(builtin_instances()[0])
    for path in tasks:
        out[f"mined:{path.name}"] = list(load_instances(path))
    return out


def _flag(s: Suspicion) -> dict[str, object]:
    return dataclasses.asdict(s)


def measure_gold(sets: dict[str, list[Instance]]) -> dict[str, object]:
    per_set: dict[str, object] = {}
    flagged: list[dict[str, object]] = []
    seen: set[str] = set()
    for name, rows in sets.items():
        hits = 0
        for inst in rows:
            found = screen_patch(inst.patch, context(inst))
            hits += bool(found)
            if found and inst.instance_id not in seen:
                flagged.append(
                    {"set": name, "instance_id": inst.instance_id, "reasons": [_flag(s) for s in found]}
                )
            seen.add(inst.instance_id)
        per_set[name] = {"rows": len(rows), "suspect": hits}
    return {"sets": per_set, "unique_rows": len(seen), "unique_suspect": len(flagged), "flagged": flagged}


def measure_forgeries() -> dict[str, object]:
    from envfarm.demo.harness import target
    from envfarm.envs.code_repair.env import builtin_instances
    from envfarm.harness.repos import locate
    from envfarm.testing.exploits import Target, exploits_for, render_patch

    instances, repos = builtin_instances()
    inst = instances[0]
    repo = locate(repos, inst.repo, inst.base_commit)
    base = target(inst)
    results = []
    for runner in ("pytest", "sympy", "django"):
        t = Target(runner, base.package_init, base.test_files)  # type: ignore[arg-type]
        for e in exploits_for(t):
            found = screen_patch(render_patch(repo, inst.base_commit, e), context(inst))
            results.append(
                {
                    "runner": runner,
                    "exploit": e.name,
                    "class": e.forgery_class,
                    "flagged": bool(found),
                    "rules": sorted({s.rule for s in found}),
                }
            )
    by_class: dict[str, dict[str, int]] = {}
    for r in results:
        c = by_class.setdefault(str(r["class"]), {"exploits": 0, "flagged": 0})
        c["exploits"] += 1
        c["flagged"] += int(bool(r["flagged"]))
    total = len(results)
    hit = sum(bool(r["flagged"]) for r in results)
    return {
        "exploits": total,
        "flagged": hit,
        "rate": hit / total if total else 0.0,
        "by_class": by_class,
        "results": results,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, default=Path(__file__).parent / "results" / "screen.json")
    ap.add_argument("--tasks", type=Path, nargs="*", default=[], help="mined task JSONL files (catalogue)")
    args = ap.parse_args()
    start = time.monotonic()
    gold = measure_gold(gold_rows(args.tasks))
    forged = measure_forgeries()
    rules = Counter(r["rule"] for f in gold["flagged"] for r in f["reasons"])  # type: ignore[index,attr-defined]
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "gold": gold,
        "gold_rules": dict(rules),
        "forgeries": forged,
        "seconds": round(time.monotonic() - start, 1),
    }
    for name, s in gold["sets"].items():  # type: ignore[attr-defined]
        print(f"gold {name}: {s['suspect']}/{s['rows']} suspect")
    print(f"gold unique rows: {gold['unique_suspect']}/{gold['unique_rows']} suspect; rules {dict(rules)}")
    for f in gold["flagged"]:  # type: ignore[attr-defined]
        print(
            "  ",
            f["instance_id"],
            "; ".join(f"{r['rule']} {r['path']}:{r['line']} {r['detail']}" for r in f["reasons"]),
        )
    print(
        f"forgeries flagged: {forged['flagged']}/{forged['exploits']} ({100 * forged['rate']:.0f}%), "
        f"by class {forged['by_class']}"
    )
    for r in forged["results"]:  # type: ignore[attr-defined]
        if not r["flagged"]:
            print("   missed:", r["runner"], r["exploit"])
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
