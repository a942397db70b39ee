"""Harbor tasks here, offline: build seconds per task (cold and warm) and validated tasks per core-hour;
prints, writes JSON.

    python bench/harbor.py --tasks DIR [--task-ids A B ...] [--limit 10] [--max-workers 2]
    python bench/harbor.py --tasks DIR --validate-only --report-dir R --run-id r1   # no cold rebuilds

Per task (the first ``--limit`` in name order, or ``--task-ids``): a cold build (``ensure_task_image(force=
True)``: the task's own layers and its pip layer built again; Debian bases and the apt layers other tasks
share stay cached, as they would in any second build of a dataset), a sibling build (the task's image
removed, its pip layer kept: what each further task of a template pays once one has built the layer that
holds its steps through the first ``pip install``) and a warm one (the same call again: a cache hit). Then
the tasks' images and pip layers are removed and ``envfarm harbor validate`` runs over the same tasks with
``--max-workers``, building them again: validated tasks per core-hour is tasks that validate / (wall hours
x cores of this machine), builds included (the more tasks share a pip layer, the more it is amortised).
Harbor's own figure for comparison: 100 parallel trials on a 14-core laptop, with cloud sandboxes (the
images pulled from a registry, not built).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from envfarm.sandbox import DEFAULT_BACKEND  # noqa: E402


def build_times(task_dirs: list[Path], cold: bool) -> list[dict[str, Any]]:
    """Cold (forced) and warm build seconds of each task; a task that cannot build gets its reason."""
    from envfarm.errors import FarmError
    from envfarm.sandbox.harbor_image import discard, ensure_task_image

    rows = []
    for path in task_dirs:
        row: dict[str, Any] = {"task": path.name}
        try:
            if cold:
                start = time.monotonic()
                built = ensure_task_image(path, force=True)
                row["cold_s"] = round(time.monotonic() - start, 3)
                discard(built.tag)
                start = time.monotonic()
                ensure_task_image(path)
                row["sibling_s"] = round(time.monotonic() - start, 3)
                row["pip_layer"] = built.pip_layer
                row["tag"] = built.tag
            start = time.monotonic()
            image = ensure_task_image(path)
            row["warm_s"] = round(time.monotonic() - start, 3)
            row["python"] = image.python
        except FarmError as e:
            row["reason"] = getattr(e, "reason", None) or "build-failed"
            row["detail"] = str(e).splitlines()[0][:300]
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def summary(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    return {"n": len(values), "median": round(statistics.median(ordered), 3),
            "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 3), "max": round(ordered[-1], 3)}


def ratio(pairs: list[tuple[float, float]]) -> float | None:
    """Median of cold / sibling over the tasks: how much faster a template's further task builds."""
    return round(statistics.median(a / b for a, b in pairs), 2) if pairs else None


def forget(builds: list[dict[str, Any]]) -> None:
    """Remove the images the build phase made (tasks first, then their pip layers): validate builds
    again."""
    from envfarm.sandbox.harbor_image import discard

    for key in ("tag", "pip_layer"):
        for ref in dict.fromkeys(r[key] for r in builds if r.get(key)):
            discard(ref)


def validate(args: argparse.Namespace, ids: list[str]) -> dict[str, Any]:
    from envfarm.envs.harbor.validate import ValidateConfig, validate_tasks

    config = ValidateConfig(tasks=args.tasks, report_dir=args.report_dir, task_ids=tuple(ids),
                            run_id=args.run_id, max_workers=args.max_workers, backend=args.backend)
    start = time.monotonic()
    result = asyncio.run(validate_tasks(config))
    wall = time.monotonic() - start
    cores = os.cpu_count() or 1
    ok = sum(r.validated for r in result.rows)
    return {"tasks": len(result.rows), "validated": ok, "wall_s": round(wall, 1), "cores": cores,
            "validated_per_core_hour": round(ok / (wall / 3600 * cores), 1) if wall > 0 else None,
            "reasons": dict(result.reasons), "report": str(result.json_path),
            "note": "a resumed run counts only the time of this invocation"}


def task_ids(args: argparse.Namespace) -> list[str]:
    from envfarm.envs.harbor.task import select_dirs

    return [p.name for p in select_dirs(args.tasks, args.task_ids or None)][: args.limit]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=Path, required=True, help="A folder of Harbor task directories.")
    parser.add_argument("--task-ids", nargs="*", default=[])
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--max-workers", type=int, default=2)
    parser.add_argument("--backend", default=DEFAULT_BACKEND)
    parser.add_argument("--report-dir", type=Path, default=ROOT / "bench" / "results" / "harbor-validate")
    parser.add_argument("--run-id", default="bench")
    parser.add_argument("--validate-only", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "harbor.json")
    args = parser.parse_args(argv)
    ids = task_ids(args)
    builds = [] if args.validate_only else build_times([args.tasks / i for i in ids], cold=True)
    forget(builds)
    result = {
        "measured": time.strftime("%Y-%m-%d"), "dataset": str(args.tasks.name), "task_ids": ids,
        "builds": builds,
        "cold_s": summary([r["cold_s"] for r in builds if "cold_s" in r]),
        "sibling_s": summary([r["sibling_s"] for r in builds if "sibling_s" in r]),
        "warm_s": summary([r["warm_s"] for r in builds if "warm_s" in r]),
        "cold_over_sibling": ratio([(r["cold_s"], r["sibling_s"]) for r in builds if "sibling_s" in r]),
        "validate": validate(args, ids),
        "harbor_published": "100 parallel trials on a 14-core laptop, cloud sandboxes, images pulled",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "builds"}, indent=1))
    return result


if __name__ == "__main__":
    main()
