"""Task factory benchmark: ``envfarm tasks mine`` over real PyPI projects in one run; prints and writes JSON.

    python bench/mine.py                                  # 5 projects, 44 tasks each, a fresh work folder
    python bench/mine.py --max-tasks 5 --packages cachetools==8.0.2 python-slugify==9.2.0   # a smoke run
    python bench/mine.py --out out/mine/tasks.jsonl --resume   # reuse the work folder (a resumed run)
    nice -n 15 python bench/mine.py --packages-file bench/packages-catalogue.txt   # the catalogue (resumable)
    python bench/mine.py --packages-file bench/packages-catalogue.txt --summarize  # figures so far, no run
    python bench/mine.py --compare-coverage --packages click==8.5.1 --max-tasks 10   # coverage vs names

The target: >= 200 harness-validated tasks from >= 5 projects in one command within 30 minutes.
Reported: tasks per project, mutants tried/kept/validated, the verdict mix, prepare/mining/validation
times, the wall time, and the load average before and after (the machine may be shared: read the load).

With ``--packages-file`` it mines a catalogue (``envfarm tasks mine --packages-file``) into
``--catalogue`` (default ``out/catalogue/``), always resuming, and rewrites ``--json`` after every project:
per project its status, tasks, seconds, where its tests were found and why it was skipped or failed;
totals; and tasks per hour and per core-hour over the wall time of every invocation so far (recorded in
the JSON: a resumed run adds to it). Core-hours are wall hours x the machine's cores, an upper bound of
what the run had on a shared machine (read the load averages beside it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

# bench/ is not a package folder: a bench script named like a package (bench/swebench.py, bench/harness.py)
# would shadow the real one for everything imported below
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from envfarm.envs.code_repair.factory.catalogue import catalogue, read_packages_file  # noqa: E402
from envfarm.envs.code_repair.factory.mine import MineConfig, Progress, mine  # noqa: E402
from envfarm.sandbox.values import IMAGE_BACKEND  # noqa: E402

PACKAGES = ("boltons==26.2.0", "cachetools==8.0.2", "tabulate==0.10.0", "python-slugify==9.2.0",
            "inflection==0.5.1")
"""attrs (28 s per suite run here, ~35 s per mutant under load) mines fine but does not fit the 30 minutes."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packages", nargs="+", default=list(PACKAGES))
    ap.add_argument("--max-tasks", type=int, default=44)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--backend", default=IMAGE_BACKEND)
    ap.add_argument("--out", type=Path, default=Path("out/bench-mine/tasks.jsonl"))
    ap.add_argument("--resume", action="store_true", help="keep the work folder of an earlier run")
    ap.add_argument("--json", type=Path, default=None, help="default bench/results/mine.json, "
                    "bench/results/catalogue.json with --packages-file")
    ap.add_argument("--packages-file", type=Path, help="mine a catalogue of these NAME==VERSION lines")
    ap.add_argument("--catalogue", type=Path, default=Path("out/catalogue"))
    ap.add_argument("--summarize", action="store_true", help="write the catalogue's figures so far, no run")
    ap.add_argument("--retry-skipped", action="store_true", help="try projects recorded skipped again")
    ap.add_argument("--no-coverage", action="store_true", help="choose test files by name, not coverage")
    ap.add_argument("--no-validate", action="store_true", help="skip harness validation (mining time only)")
    ap.add_argument("--compare-coverage", action="store_true", help="mine --packages twice at the same time, "
                    "with and without coverage-chosen test files (no validation), and compare")
    args = ap.parse_args()
    if args.packages_file is not None:
        run_catalogue(args)
        return
    if args.compare_coverage:
        compare_coverage(args)
        return
    args.json = args.json or Path("bench/results/mine.json")
    work = args.out.parent / f"{args.out.name}.work"
    if not args.resume and work.exists():
        shutil.rmtree(work)
    load_before = os.getloadavg()
    config = MineConfig(packages=tuple(args.packages), out=args.out, max_tasks=args.max_tasks,
                        jobs=args.jobs, backend=args.backend, coverage=not args.no_coverage,
                        harness_check=not args.no_validate)
    t0 = time.monotonic()
    last = {"t": 0.0}

    def on_progress(ev: Progress) -> None:
        now = time.monotonic() - t0
        if ev.stage in ("prepare", "done") or now - last["t"] > 30:
            last["t"] = now
            print(f"[{now:6.0f}s] {ev.stage} {ev.package} {ev.done}/{ev.total} kept {ev.kept} {ev.detail}",
                  flush=True)

    report = asyncio.run(mine(config, progress=on_progress))
    result = {
        "packages": [asdict(p) for p in report.packages],
        "rows": report.rows,
        "projects_with_rows": sum(1 for p in report.packages if p.emitted),
        "wall_s": round(report.wall_s, 1),
        "validate_s": round(report.validate_s, 1),
        "invalid_rows": list(report.invalid),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        "config": {"max_tasks": args.max_tasks, "jobs": args.jobs, "backend": args.backend,
                   "resumed": args.resume, "coverage": not args.no_coverage,
                   "validated": not args.no_validate},
        "mutant_test_s": mutant_seconds(work),
    }
    for p in report.packages:
        print(f"{p.package:24} candidates {p.candidates:5} tried {p.tried:4} kept {p.kept:3} "
              f"validated {p.validated:3} emitted {p.emitted:3} verdicts {p.verdicts} "
              f"prepare {p.prepare_s:.0f}s mine {p.mine_s:.0f}s")
    print(f"{report.rows} tasks from {result['projects_with_rows']} projects in {report.wall_s:.0f}s "
          f"(validation {report.validate_s:.0f}s); load {result['load_before']} -> {result['load_after']}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.json}")


def mutant_seconds(work: Path) -> dict[str, dict[str, float]]:
    """Per project, the seconds its mutants' test runs took, per verdict (from the work folder; a line torn
    by a run that was killed is skipped, as the resumed run skipped it)."""
    out: dict[str, dict[str, float]] = {}
    for path in sorted(work.glob("*/mutants.jsonl")):
        per: Counter[str] = Counter()
        for line in path.read_text().splitlines():
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                continue
            per[data["verdict"]] += data.get("duration_s") or 0.0
        out[path.parent.name] = {k: round(v, 1) for k, v in sorted(per.items())}
    return out


def compare_coverage(args: argparse.Namespace) -> None:
    """Both arms as child processes started together (the same machine load for both), then the ratios:
    seconds of mining per kept mutant, and with the preparation (baseline; the coverage run) counted."""
    root = args.out.parent
    root.mkdir(parents=True, exist_ok=True)
    arms = {"coverage": [], "names": ["--no-coverage"]}
    procs = {}
    for arm, extra in arms.items():
        cmd = [sys.executable, __file__, "--packages", *args.packages, "--max-tasks", str(args.max_tasks),
               "--jobs", str(args.jobs), "--backend", args.backend, "--no-validate", "--out",
               str(root / arm / "tasks.jsonl"), "--json", str(root / f"{arm}.json"), *extra]
        with open(root / f"{arm}.log", "w") as log:
            procs[arm] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    for arm, proc in procs.items():
        if proc.wait() != 0:
            sys.exit(f"the {arm} arm failed: see {root / f'{arm}.log'}")
    result: dict[str, Any] = {"packages": args.packages, "max_tasks": args.max_tasks, "load_after": _load()}
    for arm in arms:
        data = json.loads((root / f"{arm}.json").read_text())
        result[arm] = {p["package"]: {
            "kept": p["kept"], "tried": p["tried"], "verdicts": p["verdicts"], "prepare_s": p["prepare_s"],
            "mine_s": p["mine_s"], "mine_s_per_kept": round(p["mine_s"] / max(p["kept"], 1), 1),
            "total_s_per_kept": round((p["prepare_s"] + p["mine_s"]) / max(p["kept"], 1), 1),
        } for p in data["packages"]}
    ratios = ("mine_s_per_kept", "total_s_per_kept")
    result["names_over_coverage"] = {
        pkg: {k: round(result["names"][pkg][k] / max(v[k], 0.1), 2) for k in ratios}
        for pkg, v in result["coverage"].items()}
    print(json.dumps(result, indent=1))
    path = args.json or Path("bench/results/mine-coverage.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))
    print(f"wrote {path}")


def run_catalogue(args: argparse.Namespace) -> None:
    path = args.json or Path("bench/results/catalogue.json")
    packages = read_packages_file(args.packages_file)
    earlier = json.loads(path.read_text()).get("invocations", []) if path.is_file() else []
    this = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "wall_s": 0.0, "load_before": _load()}
    t0 = time.monotonic()

    def write(final: bool = False) -> None:
        this["wall_s"] = round(time.monotonic() - t0, 1)
        this["load_now"] = _load()
        figures = catalogue_figures(args.catalogue, packages, [*earlier, this], args.packages_file)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(figures, indent=1))
        if final:
            print(json.dumps({k: v for k, v in figures.items() if k != "per_project"}, indent=1))
            print(f"wrote {path}")

    if args.summarize:
        this["summarize_only"] = True
        write(final=True)
        return
    config = MineConfig(packages=packages, out=args.catalogue, max_tasks=args.max_tasks, jobs=args.jobs,
                        backend=args.backend, validate_workers=2)

    shown: dict[str, float] = {}
    written = [0.0]

    def on_progress(ev: Progress) -> None:
        now = time.monotonic() - t0
        if now - written[0] >= WRITE_EVERY_S:  # a run killed without its finally loses little time
            written[0] = now
            write()
        if ev.stage in ("prepare", "project", "cached"):
            print(f"[{now:6.0f}s] {ev.stage} {ev.package} {ev.done} {ev.detail}", flush=True)
        elif ev.stage in ("mutants", "validate") and now - shown.get(ev.package, -60.0) >= 60:
            shown[ev.package] = now  # a line a minute per project: where the long ones are
            kept = f" kept {ev.kept}" if ev.stage == "mutants" else ""
            print(f"[{now:6.0f}s] {ev.stage} {ev.package} {ev.done}/{ev.total}{kept}", flush=True)

    try:
        asyncio.run(catalogue(config, progress=on_progress, on_project=lambda entry: write(),
                              retry_skipped=args.retry_skipped))
    finally:
        write(final=True)


def catalogue_figures(folder: Path, packages: tuple[str, ...], invocations: list[dict[str, object]],
                      packages_file: Path) -> dict[str, object]:
    """The bench JSON of a catalogue folder: per project, totals, tasks per (core-)hour."""
    book = folder / "catalogue.json"
    projects = json.loads(book.read_text())["projects"] if book.is_file() else []
    listed = set(packages)
    rows = [p for p in projects if p["package"] in listed]
    tasks = sum(p["tasks"] for p in rows)
    wall_h = sum(float(i["wall_s"]) for i in invocations) / 3600  # type: ignore[arg-type]
    cpus = os.cpu_count() or 1
    with_tasks = [p for p in rows if p["tasks"]]
    return {
        "packages_file": str(packages_file),
        "catalogue": str(folder),
        "projects_listed": len(packages),
        "projects_tried": len(rows),
        "projects_with_tasks": len(with_tasks),
        "tasks": tasks,
        "in_package_projects": sorted(p["package"] for p in rows if p["report"].get("in_package")),
        "testpaths_projects": sorted(p["package"] for p in rows
                                     if str(p["report"].get("origin", "")).startswith("testpaths")),
        "skipped": {p["package"]: f"{p['reason']}: {p['detail'][:300]}" for p in rows
                    if p["status"] == "skipped"},
        "failed": {p["package"]: p["detail"][:300] for p in rows if p["status"] == "failed"},
        "no_tasks": sorted(p["package"] for p in rows if p["status"] == "done" and not p["tasks"]),
        "task_mix": task_mix(folder, rows),
        "wall_h": round(wall_h, 3),
        "cpus": cpus,
        "tasks_per_hour": round(tasks / wall_h, 1) if wall_h else None,
        "tasks_per_core_hour": round(tasks / (wall_h * cpus), 1) if wall_h else None,
        "invocations": invocations,
        "per_project": [{"package": p["package"], "status": p["status"], "tasks": p["tasks"],
                         "time_s": p["time_s"], "reason": p["reason"],
                         **{k: p["report"].get(k) for k in REPORTED}}
                        for p in rows],
    }


def task_mix(folder: Path, rows: list[dict[str, object]]) -> dict[str, object]:
    """The catalogue's tasks: bug classes, difficulty scores, FAIL_TO_PASS sizes (read from the rows)."""
    kinds: Counter[str] = Counter()
    scores: Counter[int] = Counter()
    failing: list[int] = []
    for p in rows:
        path = folder / str(p["file"]) if p["tasks"] else None
        for line in path.read_text().splitlines() if path is not None and path.is_file() else ():
            row = json.loads(line)
            kinds.update(row["envfarm_source"]["mutation"]["kind"].split("+"))
            scores[row["envfarm_difficulty"]["score"]] += 1
            failing.append(len(json.loads(row["FAIL_TO_PASS"])))
    return {"bug_classes": dict(kinds.most_common()), "difficulty_scores": dict(sorted(scores.items())),
            "median_fail_to_pass": statistics.median(failing) if failing else None}


WRITE_EVERY_S = 300.0
REPORTED = ("origin", "in_package", "test_files", "tests_passing", "candidates", "tried", "kept", "validated",
            "verdicts")


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


if __name__ == "__main__":
    main()
