"""SWE-bench-compatible evaluation, offline, graded with tamper rules and canary tests against forged
results. Contract: ``harness/grading.py``.

    from envfarm.harness import HarnessConfig, evaluate, load_instances, load_predictions
    instances = load_instances("swe-bench-lite/test.parquet", ids=["pallets__flask-4045"])
    predictions = load_predictions("gold", instances)
    config = HarnessConfig(run_id="r1", repo_source=Path("mirrors"))
    run = asyncio.run(evaluate(instances, predictions, config))
    run.summary.resolved_ids, run.summary_path

Modules: instances (rows, predictions), specs (env specs, test plans), repos (offline snapshots), images
(env -> instance images), tamper (rules), run (one attempt in a sandbox), grading (swebench's grading),
report (report.json, run summaries), evaluate (the whole run).
"""

from __future__ import annotations

from .config import HarnessConfig
from .env_spec import EnvSpec
from .evaluate import Event, RunReport, evaluate
from .grading import ErrorKind, InstanceReport, Outcome, ResolutionStatus, TestResults, grade
from .instances import GOLD, Instance, Prediction, load_instances, load_predictions, select
from .report import RunSummary, wilson
from .specs import Plan, SpecCatalog, plan_all
from .tamper import RULES, Finding, Policy

__all__ = [
    "GOLD",
    "RULES",
    "EnvSpec",
    "ErrorKind",
    "Event",
    "Finding",
    "HarnessConfig",
    "Instance",
    "InstanceReport",
    "Outcome",
    "Plan",
    "Policy",
    "Prediction",
    "ResolutionStatus",
    "RunReport",
    "RunSummary",
    "SpecCatalog",
    "TestResults",
    "evaluate",
    "grade",
    "load_instances",
    "load_predictions",
    "plan_all",
    "select",
    "wilson",
]
