"""CodeRepair-v0 on real SWE-bench rows (imported by ``bench/swebench.py --coderepair``): for each row,
``gymnasium.make("envfarm/CodeRepair-v0", instances=F, instance_ids=[row], repo_source=DIR)``, then one
episode that applies the gold patch and submits (reward must be 1.0) and one that submits the untouched
workspace (reward must be 0.0; an empty diff scores 0 without a test run), graded by the harness's own
code in a fresh sandbox."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import gymnasium

import envfarm.envs  # noqa: F401  (registers the envs)

SUBMIT = json.dumps({"name": "submit", "arguments": {}})


def _episode(env: Any, instance_id: str, actions: list[str] | None) -> tuple[float, dict[str, Any], float]:
    t = time.perf_counter()
    env.reset(options={"instance_id": instance_id})
    reward, info = 0.0, {}
    for action in actions if actions is not None else env.unwrapped.oracle():
        _, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    return float(reward), info, time.perf_counter() - t


def coderepair(ids: list[str], instances: Path, repo_source: Path) -> dict[str, Any]:
    """Per row: the gold and empty episodes' rewards, seconds and any infra error."""
    rows: dict[str, Any] = {}
    for iid in ids:
        env = gymnasium.make("envfarm/CodeRepair-v0", instances=str(instances), instance_ids=[iid],
                             repo_source=str(repo_source), backend="docker")  # fmt: skip
        try:
            gold, gold_info, gold_s = _episode(env, iid, None)
            empty, empty_info, empty_s = _episode(env, iid, [SUBMIT])
        finally:
            env.close()
        rows[iid] = {
            "gold_reward": gold,
            "empty_reward": empty,
            "gold_s": round(gold_s, 2),
            "empty_s": round(empty_s, 2),
            "infra_error": gold_info.get("infra_error") or empty_info.get("infra_error"),
        }
        print(f"{iid}: gold {gold} ({gold_s:.0f}s), empty {empty} ({empty_s:.0f}s)", flush=True)
    ok = [i for i, r in rows.items() if r["gold_reward"] == 1.0 and r["empty_reward"] == 0.0]
    return {"rows": rows, "gold_1_empty_0": len(ok), "of": len(rows)}
