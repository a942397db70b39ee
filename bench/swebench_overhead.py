"""Per-instance wall time of the harness against the same tests in a plain container of the same image
(imported by ``bench/swebench.py --overhead``).

For each row, with its images already built (a first harness run builds them and is not timed), in turns:

- ``harness``: ``evaluate()`` of the gold patch alone, start to report: a locked-down sandbox (no network,
  read-only root, caps dropped, limits), the repo copied into its tmpfs, patch and tamper checks, test_patch,
  canary tests, the tests, grading.
- ``plain``: ``docker run`` of the instance image with no network, as root, no limits: the repo copied to
  where its editable install points, the gold patch and test_patch applied with ``git apply``, the same test
  command (``eval_script``), container removed. Its log is graded too, so both runs are known to resolve.

Turns alternate (harness, plain, harness, plain, ...) so load on this shared machine hits both alike; the
figure is the ratio of medians per row.
"""

from __future__ import annotations

import asyncio
import io
import statistics
import tarfile
import time
from pathlib import Path
from typing import Any

from envfarm.harness import HarnessConfig, Instance, Prediction, SpecCatalog, evaluate, grade
from envfarm.harness.images import PRISTINE, WORKDIR
from envfarm.harness.run import eval_script
from envfarm.sandbox import dockerutil

PLAIN = f"""\
set -uo pipefail
cp -a {PRISTINE} {WORKDIR}
cd /testbed
git apply /tmp/bench/gold.diff && git apply /tmp/bench/test.diff || exit 97
echo '>>>>> Start Test Output'
bash /tmp/bench/eval.sh
echo '>>>>> End Test Output'
"""


async def harness_once(inst: Instance, config: HarnessConfig) -> tuple[float, str, str]:
    """Seconds of one gold evaluation, its outcome and the instance image it ran in."""
    preds = {inst.instance_id: Prediction(inst.instance_id, "gold", inst.patch)}
    t = time.perf_counter()
    run = await evaluate([inst], preds, config)
    seconds = time.perf_counter() - t
    report = run.reports[inst.instance_id]
    image = next((tag for tag in run.images if ".eval." in tag), "")
    return seconds, str(report.outcome.value), image


def _archive(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"bench/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def plain_once(inst: Instance, image: str, catalog: SpecCatalog, timeout_s: float) -> tuple[float, str]:
    """Seconds of the same tests in a plain container (create to removal) and the outcome of its log."""
    plan = catalog.plan(inst)
    files = {
        "run.sh": PLAIN,
        "gold.diff": inst.patch,
        "test.diff": inst.test_patch,
        "eval.sh": eval_script(plan),
    }
    client = dockerutil.client()
    t = time.perf_counter()
    box = client.containers.create(image, ["bash", "/tmp/bench/run.sh"], network_mode="none")
    try:
        box.put_archive("/tmp", _archive(files))
        box.start()
        box.wait(timeout=timeout_s)
        log = box.logs().decode(errors="replace")
    finally:
        box.remove(force=True)
    seconds = time.perf_counter() - t
    graded = grade(inst, log, model_patch=inst.patch, log_parser=plan.log_parser, eval_type=plan.eval_type)
    return seconds, str(graded.outcome.value)


async def overhead(
    insts: list[Instance], repo_source: Path, report_dir: Path, turns: int = 3, timeout_s: float = 1800.0
) -> dict[str, Any]:
    """Per row: harness and plain seconds over ``turns`` alternating turns, and the ratio of medians."""
    catalog = await asyncio.to_thread(SpecCatalog)
    out: dict[str, Any] = {}
    for inst in insts:

        def config(run_id: str) -> HarnessConfig:
            return HarnessConfig(run_id=run_id, report_dir=report_dir, repo_source=repo_source, max_workers=1,
                                 timeout_s=timeout_s)  # fmt: skip

        _, outcome, image = await harness_once(inst, config(f"warm-{inst.instance_id}"))  # builds the images
        harness_s, plain_s, outcomes = [], [], {"harness": outcome, "plain": ""}
        for k in range(turns):
            seconds, outcomes["harness"], _ = await harness_once(inst, config(f"t{k}-{inst.instance_id}"))
            harness_s.append(seconds)
            seconds, outcomes["plain"] = await asyncio.to_thread(plain_once, inst, image, catalog, timeout_s)
            plain_s.append(seconds)
            print(f"{inst.instance_id} turn {k}: harness {harness_s[-1]:.1f}s, plain {plain_s[-1]:.1f}s",
                  flush=True)  # fmt: skip
        h, p = statistics.median(harness_s), statistics.median(plain_s)
        out[inst.instance_id] = {
            "repo": inst.repo,
            "version": inst.version,
            "image": image,
            "harness_s": [round(x, 2) for x in harness_s],
            "plain_s": [round(x, 2) for x in plain_s],
            "outcomes": outcomes,
            "ratio": round(h / p, 3),
        }
    ratios = [r["ratio"] for r in out.values()]
    return {
        "rows": out,
        "turns": turns,
        "ratio_median": round(statistics.median(ratios), 3) if ratios else None,
        "ratio_max": max(ratios, default=None),
    }
