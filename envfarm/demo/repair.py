"""Demo part 4: one ``envfarm/CodeRepair-v0`` episode on the harness part's row, played by the oracle policy
through the farm (create the gold patch, apply it with bash, submit), graded by the harness's code."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from envfarm.envs.meta import CodeRepairMeta
from envfarm.errors import FarmError
from envfarm.rollout import Farm, FarmConfig, OraclePolicy, Trajectory
from envfarm.sandbox.values import IMAGE_BACKEND

from .harness import pick_row
from .result import DemoConfig, PartResult, Progress

ENV_ID = "envfarm/CodeRepair-v0"
COLUMNS = ("step", "tool call", "reward", "observation (start)")


def _call(turn_action: str) -> str:
    try:
        call: Any = json.loads(turn_action)
        args = ", ".join(f"{k}={_short(v)}" for k, v in (call.get("arguments") or {}).items())
        return f"{call.get('name', '?')}({args})"
    except (ValueError, AttributeError):
        return _short(turn_action, 60)


def _short(value: object, width: int = 40) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def episode_rows(traj: Trajectory) -> tuple[tuple[str, ...], ...]:
    """One row per step: the call the policy made, the reward, the first words of what the env answered."""
    return tuple((str(n), _call(t.action), f"{t.reward:g}", _short(t.observation, 70))
                 for n, t in enumerate(traj.turns, 1))


async def repair_part(config: DemoConfig, out: Path, progress: Progress) -> PartResult:
    """Play one oracle episode; the part is ok when the episode ran and the harness resolved it."""
    start = time.monotonic()
    row = await pick_row(config)
    kwargs: dict[str, Any] = {"instance_ids": [row.instance.instance_id]}
    if not row.bundled:
        kwargs |= {"tasks": str(config.instances), "repo_source": str(row.repo_source)}
    farm_config = FarmConfig(ENV_ID, 1, concurrency=1, backend=IMAGE_BACKEND, env_kwargs=kwargs)
    run_dir = out / "coderepair"
    farm = Farm(farm_config, OraclePolicy(), run_dir=run_dir, summary_path=run_dir / "summary.json")
    progress("code repair", 0, 1)
    episodes = [t async for t in farm.run()]
    progress("code repair", 1, 1)
    if not episodes:
        raise FarmError(f"{ENV_ID}: the farm finished without an episode (see {run_dir})")
    traj = episodes[0]
    if not traj.ok:
        raise FarmError(f"the {ENV_ID} episode ended {traj.status}: {traj.infra_error or traj.error} "
                        f"(trajectory: {run_dir}/spool.jsonl)")
    meta = CodeRepairMeta.from_json(traj.meta)
    verdict = "resolved" if meta.resolved else f"not resolved ({meta.status or traj.status})"
    notes = (f"task {traj.task_id}; verdict: {verdict}; reward {traj.reward:g}; graded in "
             f"{(meta.grade_s or 0.0):.1f} s by a fresh harness run (tamper rules, canaries)",
             f"trajectory: {run_dir}/spool.jsonl (messages, tool calls, timings); "
             f"`envfarm eval --env {ENV_ID}` writes SWE-bench predictions the harness grades alike")
    return PartResult("repair", f"4. {ENV_ID}: one episode, oracle policy, {IMAGE_BACKEND} sandbox", COLUMNS,
                      episode_rows(traj), traj.ok and bool(meta.resolved), time.monotonic() - start, notes)


__all__ = ["ENV_ID", "episode_rows", "repair_part"]
