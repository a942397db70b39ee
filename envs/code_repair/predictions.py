"""SWE-bench predictions from a CodeRepair evaluation: ``envfarm eval --env envfarm/CodeRepair-v0`` writes

    RUN/predictions.jsonl       attempt 0 of each task: {instance_id, model_name_or_path, model_patch}
    RUN/predictions.all.jsonl   every attempt, with its ``attempt`` and ``resolved`` (pass@k material)

so the same patches can be graded again by ``envfarm harness run --predictions RUN/predictions.jsonl`` (or by
SWE-bench itself). An episode lost to infrastructure is not a prediction (it was never made): it is left out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envfarm.envs.core import EpisodeRecord
from envfarm.envs.meta import CodeRepairMeta

PREDICTIONS = "predictions.jsonl"
ALL_ATTEMPTS = "predictions.all.jsonl"


def prediction(trajectory: EpisodeRecord) -> dict[str, Any]:
    """One SWE-bench prediction row; an episode that never submitted predicts the empty patch."""
    return {"instance_id": trajectory.task_id, "model_name_or_path": trajectory.policy or "envfarm",
            "model_patch": CodeRepairMeta.from_json(trajectory.meta).patch or ""}


def write_predictions(trajectories: Sequence[EpisodeRecord], out_dir: Path) -> list[Path]:
    """Write both files (atomically) and return their paths: ``CodeRepairEnv.eval_artifacts``."""
    made = sorted((t for t in trajectories if t.ok), key=lambda t: (t.task_id, t.attempt))
    first = [prediction(t) for t in made if t.attempt == 0]
    every = [{**prediction(t), "attempt": t.attempt,
              "resolved": bool(CodeRepairMeta.from_json(t.meta).resolved)} for t in made]
    return [_write_jsonl(out_dir / PREDICTIONS, first), _write_jsonl(out_dir / ALL_ATTEMPTS, every)]


def _write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(path)
    return path


__all__ = ["ALL_ATTEMPTS", "PREDICTIONS", "prediction", "write_predictions"]
