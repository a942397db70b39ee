"""Run folders for the dashboard tests and scripts/dashboard_screenshots.py, written by the real code.

- ``farm_run``: a real farm (in-process oracle policy, ToolCalc, bwrap), optionally slowed per action.
- ``write_trainer_run``: metrics.jsonl + summary.json in the trainer's agreed format.
- ``write_harness_run``: a harness report dir written by the harness's own RunFolder, grade(), summarize()
  and write_summary() for the toy repository of tests/harness (resolved, partial, tampered, error, empty).
- with docker: ``code_repair_run`` (a real CodeRepair-v0 farm run: the oracle's fix, run_tests, submit) and
  ``harness_run`` (a real ``evaluate()`` of built-in code-repair rows: gold, wrong fix, tamper, empty).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from envfarm.dashboard.server import DashboardServer
from envfarm.harness.grading import ErrorKind, InstanceReport, error_report, grade
from envfarm.harness.instances import Prediction, instance_from_row
from envfarm.harness.report import Artifacts, RunFolder, summarize, write_summary
from envfarm.rollout import Farm, FarmConfig, OraclePolicy
from envfarm.rollout.policies import EpisodeView, Reply, text_reply
from envfarm.sandbox import DEFAULT_BACKEND
from envfarm.testing.toyrepo import PATCHES, row

F2P = ("tests/test_ops.py::test_mul", "tests/test_ops.py::test_div")
P2P = ("tests/test_ops.py::test_add", "tests/test_ops.py::test_add_negative")
HARNESS_RUN_ID = "r1"
HARNESS_MODEL = "toy/model"


class SlowOracle(OraclePolicy):
    """The oracle, ``delay_s`` slower per action (so a page can watch the counters move)."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    async def act(self, view: EpisodeView) -> Reply:
        await asyncio.sleep(self.delay_s)
        return await super().act(view)


async def farm_run(run_dir: Path, episodes: int = 12, concurrency: int = 4, delay_s: float = 0.0,
                   env_id: str = "envfarm/ToolCalc-v0", backend: str = DEFAULT_BACKEND) -> Path:
    """Run a real farm into ``run_dir``; returns it."""
    policy = SlowOracle(delay_s) if delay_s else OraclePolicy()
    farm = Farm(FarmConfig(env_id=env_id, episodes=episodes, concurrency=concurrency, backend=backend,
                           pool_size=concurrency), policy, run_dir=run_dir)
    async for _ in farm.run():
        pass
    return run_dir


def trainer_records(t0: float = 1_764_450_000.0) -> list[dict[str, Any]]:
    """30 SFT steps then 30 RL updates in the agreed metrics.jsonl format, as the trainer writes them
    (each phase counts its steps from 1; every RL update publishes a weight version), plus an unknown kind."""
    recs: list[dict[str, Any]] = []
    for step in range(1, 31):
        recs.append({"kind": "update", "time": t0 + step * 2, "step": step, "phase": "sft",
                     "loss": round(2.0 * math.exp(-step / 10) + 0.2, 4), "reward_mean": None, "kl": None,
                     "clip_frac": None, "lr": 1e-3, "samples": 16, "tokens": 5120, "version": 0})
    recs.append({"kind": "eval", "time": t0 + 70, "phase": "before_rl", "mean_reward": 0.41,
                 "episodes": 1000})
    for step in range(1, 31):
        t = t0 + 80 + step * 10
        recs.append({"kind": "update", "time": t, "step": step, "phase": "rl",
                     "loss": round(0.05 * math.exp(-step / 20), 4),
                     "reward_mean": round(0.4 + 0.01 * step, 3),
                     "kl": round(0.002 * step, 4), "clip_frac": 0.1, "lr": 3e-4, "samples": 128,
                     "tokens": 40960, "version": step})
        recs.append({"kind": "publish", "time": t + 0.5, "version": step, "bytes": 3_400_000,
                     "seconds": 0.02})
    recs.append({"kind": "eval", "time": t0 + 400, "phase": "after_rl", "mean_reward": 0.73,
                 "episodes": 1000})
    recs.append({"kind": "checkpoint", "time": t0 + 401, "path": "ckpt/final.safetensors"})  # unknown kind
    return recs


def write_trainer_run(folder: Path, records: list[dict[str, Any]] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r) for r in (records if records is not None else trainer_records())]
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "summary.json").write_text(json.dumps({"eval_before_rl": 0.41, "eval_after_rl": 0.73,
                                                     "eval_episodes": 1000, "diff_ci95": [0.29, 0.35]}))
    return folder


def _log(passed: tuple[str, ...], failed: tuple[str, ...] = ()) -> str:
    lines = [f"PASSED {t}" for t in passed] + [f"FAILED {t} - assert 0" for t in failed]
    return (">>>>> Start Test Output\n" + "\n".join(lines) + "\n>>>>> End Test Output\n"
            f">>>>> Test Exit Code: {1 if failed else 0}\n")


def write_harness_run(report_dir: Path) -> Path:
    """Five instances of the toy repo graded by the harness's code; returns ``report_dir``."""
    base = "0" * 40
    cases = {  # instance -> (patch, test log or None for an error)
        "envfarm-tests__calc-1": (PATCHES["gold"], _log(F2P + P2P)),
        "envfarm-tests__calc-2": (PATCHES["half"], _log(F2P[:1] + P2P, F2P[1:])),
        "envfarm-tests__calc-3": (PATCHES["conftest"], _log(F2P + P2P)),
        "envfarm-tests__calc-4": (PATCHES["loop"], None),
        "envfarm-tests__calc-5": ("", ""),
    }
    instances = [instance_from_row(row(iid, base)) for iid in cases]
    folder = RunFolder(report_dir, HARNESS_RUN_ID, HARNESS_MODEL)
    reports: dict[str, InstanceReport] = {}
    for inst in instances:
        patch, log = cases[inst.instance_id]
        if log is None:
            report = error_report(inst.instance_id, HARNESS_MODEL, ErrorKind.ENV_TIMEOUT,
                                  "the tests ran past 60s and so does the unpatched base", attempts=2)
        else:
            report = grade(inst, log, model_patch=patch, model_name_or_path=HARNESS_MODEL)
        folder.write_artifacts(inst.instance_id, Artifacts(
            patch=patch, test_log=log or "", eval_script="#!/bin/bash\npytest -rA tests/test_ops.py\n",
            applied_diff=patch,
            steps=[f"apply: git apply --verbose ({inst.instance_id})", "tests: pytest -rA"]))
        folder.write_report(report)
        reports[inst.instance_id] = report
    predictions = {iid: Prediction(iid, HARNESS_MODEL, patch) for iid, (patch, _) in cases.items()}
    write_summary(folder, summarize(instances, predictions, reports, HARNESS_RUN_ID, HARNESS_MODEL), reports)
    return report_dir


def _call(i: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}


def code_repair_trajectory(run_id: str, index: int, patch_name: str) -> Any:
    """A CodeRepair-v0-shaped trajectory of the toy repo: what env.py leaves in ``meta`` after grading
    (patch, swebench tests status, tamper findings), graded here by the harness's own grade()."""
    from envfarm.envs.code_repair import tools
    from envfarm.rollout.trajectory import Timings, Trajectory, Turn

    inst = instance_from_row(row("envfarm-tests__calc-1", "0" * 40))
    patch = PATCHES[patch_name]
    report = grade(inst, _log(F2P + P2P) if patch_name != "half" else _log(F2P[:1] + P2P, F2P[1:]),
                   model_patch=patch, model_name_or_path="coderepair")
    test_log = ("$ pytest -q tests/test_ops.py\n..F.                                              [100%]\n"
                "FAILED tests/test_ops.py::test_div - assert 16 == 4\n1 failed, 3 passed in 0.03s\n")
    found = "1:def add(a, b):\n5:def mul(a, b):\n9:def div(a, b):"
    Step = tuple[str, dict[str, Any], str]
    steps: list[Step] = [("bash", {"command": "grep -n 'def ' calc/ops.py"}, found),
             ("str_replace", {"path": "calc/ops.py", "old": "    return a + b\n\n\ndef div",
                              "new": "    return a * b\n\n\ndef div"}, "Edited calc/ops.py (1 replacement)."),
             ("run_tests", {"paths": ["tests/test_ops.py"]}, test_log),
             ("submit", {}, tools.verdict(report))]
    prompt = "Fix the bug: mul adds and div multiplies."
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    turns = []
    for i, (name, args, obs) in enumerate(steps):
        messages += [_call(i, name, args), {"role": "tool", "tool_call_id": f"call_{i}", "content": obs}]
        last = i == len(steps) - 1
        reward = float(report.resolved) if last else 0.0
        turns.append(Turn(json.dumps({"name": name, "arguments": args}), obs, reward, last, False,
                          tool_name=name, policy_s=0.4, env_s=3.1 if last else 0.2))
    meta = {"resolved": report.resolved, "status": report.status.value, "patch": patch,
            "tests": report.tests.to_swebench() if report.tests else None,
            "findings": [f.describe() for f in report.findings], "grade_s": 3.1}
    return Trajectory(f"{run_id}:{index:06d}", "envfarm/CodeRepair-v0", index, index, inst.instance_id,
                      "completed", tuple(turns), tuple(messages), (), policy="openai:http://127.0.0.1:8000/v1",
                      weight_version=3, timings=Timings(1.2, 1.6, 3.7, 0.0, 6.6),
                      started_at=1_764_450_000.0 + index, meta=meta)


def write_code_repair_run(run_dir: Path) -> Path:
    """A farm run folder (RunDir + spool lines from Trajectory.to_json) with code-repair episodes."""
    from envfarm.rollout.runs import RunDir, RunSpec

    spec = RunSpec("envfarm/CodeRepair-v0", 3, policy="openai:http://127.0.0.1:8000/v1", backend="docker")
    asyncio.run(RunDir.create(run_dir, spec))
    trajs = [code_repair_trajectory(spec.run_id, i, p) for i, p in enumerate(("gold", "half", "conftest"))]
    (run_dir / "spool.jsonl").write_text("".join(t.to_json() + "\n" for t in trajs))
    return run_dir


@contextlib.contextmanager
def serve_in_thread(paths: Sequence[Path]) -> Iterator[str]:
    """The dashboard on 127.0.0.1 (any free port) in a thread with its own loop; yields its URL."""
    box: list[str | BaseException] = []
    stop = threading.Event()

    async def main() -> None:
        try:
            async with DashboardServer(paths, port=0) as srv:
                box.append(srv.url)
                await asyncio.to_thread(stop.wait)
        except BaseException as e:
            box.append(e)

    thread = threading.Thread(target=asyncio.run, args=(main(),), name="dashboard", daemon=True)
    thread.start()
    try:
        while not box:
            stop.wait(0.02)
        if isinstance(box[0], BaseException):
            raise box[0]
        yield box[0]
    finally:
        stop.set()
        thread.join(10)


class OracleThenTests(OraclePolicy):
    """The oracle, with a ``run_tests`` call before its submit (so the trajectory holds a test log)."""

    name = "oracle+tests"

    async def act(self, view: EpisodeView) -> Reply:
        plan: list[str] = view.state.setdefault("oracle", list(view.env.oracle()))
        if not view.state.get("tests"):
            plan.insert(len(plan) - 1, json.dumps({"name": "run_tests", "arguments": {}}))
            view.state["tests"] = True
        return text_reply(plan[view.step], view)


async def code_repair_run(run_dir: Path, episodes: int = 2) -> Path:
    """A real CodeRepair-v0 farm run on docker (built-in tasks)."""
    config = FarmConfig(env_id="envfarm/CodeRepair-v0", episodes=episodes, concurrency=2, backend="docker")
    farm = Farm(config, OracleThenTests(), run_dir=run_dir)
    async for _ in farm.run():
        pass
    return run_dir


CONFTEST_FORGERY = (
    "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n+++ b/conftest.py\n"
    "@@ -0,0 +1,6 @@\n+import pytest\n+\n+\n+@pytest.hookimpl(hookwrapper=True)\n"
    "+def pytest_runtest_makereport(item, call):\n+    (yield).get_result().outcome = \"passed\"\n")
NOT_A_PATCH = "diff --git a/nope.py b/nope.py\n--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-x\n+y\n"


async def harness_run(report_dir: Path, run_id: str = "demo", model: str = "demo/model") -> Path:
    """A real harness run (docker) of five built-in code-repair rows: the gold fix, another bug's fix
    (applies, fixes nothing), a conftest.py forgery (the tamper rule reverts it), an empty patch and a patch
    that does not apply."""
    from envfarm.envs.code_repair import builtin
    from envfarm.harness import HarnessConfig, evaluate

    projects = builtin.load_projects()
    insts = [instance_from_row(r, r["instance_id"]) for r in builtin.rows(projects)[:5]]
    patches = [insts[0].patch, insts[0].patch, CONFTEST_FORGERY, "", NOT_A_PATCH]
    preds = {i.instance_id: Prediction(i.instance_id, model, p) for i, p in zip(insts, patches, strict=True)}
    config = HarnessConfig(run_id=run_id, report_dir=report_dir, repo_source=builtin.cached_repos(projects),
                           max_workers=2, timeout_s=300)
    await evaluate(insts, preds, config)
    return report_dir
