"""Harbor round trip: envfarm's CodeRepair tasks exported as Harbor task folders, loaded by Harbor's own task
loader, and run again through ``envfarm/Harbor-v0`` (oracle 1, no-op 0 on every one); prints and writes
the ``envfarm harbor validate`` report with the loader's count.

    python bench/harbor_roundtrip.py --name builtin --work DIR                     # the 42 built-in tasks
    python bench/harbor_roundtrip.py --name catalogue --work DIR --instances CATALOGUE [--limit 200] \
        [--repo-source WORK/repos --specs WORK/specs]      # a mining work folder: no rebuild of the repos
    python bench/harbor_roundtrip.py --name flask --work DIR --instances ROWS --repo-source MIRRORS \\
        --instance-ids pallets__flask-4992 ...

Writes ``docs/harbor/roundtrip-<name>.json`` (``--out``), which ``scripts/docs_results.py`` renders into
docs/results/harbor.md. The validation uses ``--prune-images`` (each task's image and bwrap export are
removed once its row is written) and resumes under ``DIR/reports`` with the same ``--run-id``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from envfarm.sandbox import DEFAULT_BACKEND  # noqa: E402

HARBOR_PYTHON = ROOT / ".venv-harbor" / "bin" / "python"
LOADER = """
import json, sys
from pathlib import Path
from harbor.models.task.task import Task
ok, failed = [], {}
for d in sys.argv[1:]:
    try:
        t = Task(Path(d))
        assert t.config.environment.docker_image and t.instruction.strip()
        ok.append(Path(d).name)
    except Exception as e:
        failed[Path(d).name] = f"{type(e).__name__}: {e}"[:300]
print(json.dumps({"loaded": ok, "failed": failed}))
"""


def export(args: argparse.Namespace, out: Path) -> list[str]:
    """The task folders (names) exported into ``out`` (existing folders are written again)."""
    from envfarm.envs.code_repair.env import CodeRepairEnv
    from envfarm.envs.code_repair.harbor_export import export_harbor

    ids = args.instance_ids or None
    source = {"repo_source": args.repo_source, "specs": args.specs}
    env = CodeRepairEnv(tasks=args.instances, instance_ids=ids, **source)
    if args.limit and len(env.plans) > args.limit:
        keep = sorted(p.instance.instance_id for p in env.plans)[: args.limit]
        env = CodeRepairEnv(tasks=args.instances, instance_ids=keep, **source)
    done = asyncio.run(export_harbor(env, out))
    return sorted(e.folder.name for e in done)


def harbor_load(folders: list[Path]) -> dict[str, Any]:
    """Harbor's own ``Task`` loader over every folder (its virtualenv, made by `make setup`)."""
    if not HARBOR_PYTHON.is_file():
        raise SystemExit(f"{HARBOR_PYTHON} is missing: run `make setup` (it makes .venv-harbor)")
    res = subprocess.run([str(HARBOR_PYTHON), "-c", LOADER, *map(str, folders)], capture_output=True,
                         text=True, timeout=1800, check=False)
    if res.returncode != 0:
        raise SystemExit(f"Harbor's loader failed: {res.stderr[-2000:]}")
    found: dict[str, Any] = json.loads(res.stdout)
    return found


def validate(args: argparse.Namespace, tasks: Path, names: list[str]) -> tuple[list[dict[str, Any]], float]:
    from dataclasses import asdict

    from envfarm.envs.harbor.validate import ValidateConfig, validate_tasks

    config = ValidateConfig(tasks=tasks, report_dir=args.work / "reports", task_ids=tuple(names),
                            run_id=args.run_id, max_workers=args.max_workers, backend=args.backend,
                            prune_images=True)
    start = time.monotonic()
    result = asyncio.run(validate_tasks(config, _print_row))
    return [asdict(r) for r in result.rows], time.monotonic() - start


def _print_row(event: Any) -> None:
    if event.row is not None:
        print(f"{event.task}: {event.row.reason or 'ok'} ({event.row.seconds:.0f} s)", flush=True)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", required=True, help="builtin, catalogue, flask, ...: names the output")
    parser.add_argument("--work", type=Path, required=True, help="work folder (exports, reports)")
    parser.add_argument("--instances", type=Path, default=None, help="default: the built-in tasks")
    parser.add_argument("--instance-ids", nargs="*", default=[])
    parser.add_argument("--repo-source", default=None)
    parser.add_argument("--specs", nargs="*", default=[], help="spec folders (a mining work folder's specs/)")
    parser.add_argument("--limit", type=int, default=0, help="the first N instance ids (0: all)")
    parser.add_argument("--max-workers", type=int, default=2)
    parser.add_argument("--backend", default=DEFAULT_BACKEND)
    parser.add_argument("--run-id", default="roundtrip")
    parser.add_argument("--out", type=Path, default=None, help="default docs/harbor/roundtrip-NAME.json")
    args = parser.parse_args(argv)
    tasks = args.work / "tasks"
    start = time.monotonic()
    names = export(args, tasks)
    export_s = time.monotonic() - start
    loaded = harbor_load([tasks / n for n in names])
    rows, validate_s = validate(args, tasks, names)
    ok = [r for r in rows if r["oracle_reward"] == 1.0 and r["noop_reward"] == 0.0]
    result = {
        "dataset": f"envfarm CodeRepair, exported ({args.name})", "commit": "-",
        "measured": time.strftime("%Y-%m-%d"), "backend": args.backend, "run_id": args.run_id,
        "command": " ".join(["python bench/harbor_roundtrip.py", "--name", args.name, "--work", "DIR",
                             *(["--instances", "INSTANCES"] if args.instances else []),
                             *(["--limit", str(args.limit)] if args.limit else [])]),
        "roundtrip": {"exported": len(names), "loaded_by_harbor": len(loaded["loaded"]),
                      "harbor_load_failures": loaded["failed"], "oracle_1_and_noop_0": len(ok),
                      "export_s": round(export_s, 1), "validate_s": round(validate_s, 1)},
        "rows": rows,
    }
    out = args.out or ROOT / "docs" / "harbor" / f"roundtrip-{args.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["roundtrip"], indent=1))
    return result


if __name__ == "__main__":
    main()
