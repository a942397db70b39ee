"""How long does the grader take to plant canaries and twins in a row's test module? Per row, on the host.

    python bench/plant_time.py --repo-source MIRRORS [--trials 1] [--limit-s 60] [--json F]

Every SWE-bench row (lite, then verified) whose repository ``MIRRORS`` holds, and every built-in
code-repair task: the test files at the base commit with test_patch (git only, no docker), canaries planted
and the differential check's twins added as a graded run does (``canary_recogniser.row_plantings``, which
the recogniser bench uses too), ``--trials`` times per row with fixed seeds. A graded run plants once, in a
worker thread of the harness, so a slow row holds that thread (and its CPU) for as long. Rows past
``--limit-s`` are stopped there and counted as slow. Prints the rows over 5 s, the total and the slowest,
and writes JSON (default ``bench/results/plant_time.json``).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from datetime import date
from pathlib import Path
from types import FrameType

sys.path.insert(0, str(Path(__file__).parent))

from canary_recogniser import DATA, builtin_rows, row_plantings, swe_rows

from envfarm.harness.specs import SpecCatalog


class _Slow(Exception):
    """A row's planting ran past ``--limit-s``."""


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise _Slow


def timed(args: argparse.Namespace) -> list[dict[str, object]]:
    """Seconds per row, and whether it finished (``ok``), ran past the limit (``slow``) or failed."""
    catalog = SpecCatalog()
    signal.signal(signal.SIGALRM, _alarm)
    out: list[dict[str, object]] = []
    for source, inst, repo in [*swe_rows(args), *builtin_rows()]:
        start = time.monotonic()
        signal.alarm(args.limit_s)
        try:
            row_plantings(source, inst, repo, catalog, args.trials, 0)
            status = "ok"
        except _Slow:
            status = "slow"
        except Exception as e:  # a row that cannot be planted is reported, not fatal
            status = f"error: {type(e).__name__}: {e}"[:200]
        finally:
            signal.alarm(0)
        took = round(time.monotonic() - start, 2)
        out.append({"instance_id": inst.instance_id, "source": source, "seconds": took, "status": status})
        if took > 5 or status != "ok":
            print(f"{inst.instance_id}: {took:.1f} s {status}", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo-source", type=Path, required=True, help="folder of owner__name.git mirrors")
    ap.add_argument("--data", type=Path, default=DATA, help="folder of the SWE-bench parquet sets")
    ap.add_argument("--trials", type=int, default=1, help="plantings per row")
    ap.add_argument("--limit-s", type=int, default=60, help="stop a row's plantings after this many seconds")
    ap.add_argument("--json", type=Path, default=Path(__file__).parent / "results" / "plant_time.json")
    args = ap.parse_args()
    start = time.monotonic()
    rows = timed(args)
    slowest = sorted(rows, key=lambda r: -float(r["seconds"]))[:10]  # type: ignore[arg-type]
    result = {
        "measured": date.today().isoformat(),
        "trials": args.trials,
        "limit_s": args.limit_s,
        "rows": len(rows),
        "total_s": round(sum(float(r["seconds"]) for r in rows), 1),  # type: ignore[arg-type]
        "slow": [r["instance_id"] for r in rows if r["status"] == "slow"],
        "failed": [r for r in rows if str(r["status"]).startswith("error")],
        "slowest": slowest,
        "seconds": round(time.monotonic() - start, 1),
    }
    top = slowest[0]
    print(f"{result['rows']} rows, {result['total_s']} s planting in all; slowest {top['instance_id']} "
          f"{top['seconds']} s; {len(result['slow'])} past {args.limit_s} s")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
