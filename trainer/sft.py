"""Warm start: oracle demonstrations from the farm, then supervised fine-tuning on them.

    demos = await collect_demos(FarmConfig(env_id, episodes=2000, seed=1_000_000, backend="bwrap"), run_dir)
    samples = sft_samples(demos, policy)                 # samples.py: rendered with the policy's template
    batch = sft_batch(samples, batch_size=16, seed=0, step=k)

Demonstrations are ordinary farm episodes of the in-process ``oracle`` policy (the env's reference
solution), in their own run folder (so an interrupted collection resumes). The batch of SFT step k is a
function of (seed, k) alone: a resumed run trains on exactly the batches an uninterrupted one would.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from pathlib import Path

from envfarm.errors import TrainerError
from envfarm.rollout.farm import Farm, FarmConfig
from envfarm.rollout.policies import OraclePolicy
from envfarm.rollout.runs import RunDir
from envfarm.rollout.trajectory import Trajectory

from .samples import TokenSample


async def collect_demos(config: FarmConfig, run_dir: Path) -> list[Trajectory]:
    """Play ``config.episodes`` oracle episodes (or finish an interrupted collection in ``run_dir``) and
    return every trajectory of the run."""
    resume = await asyncio.to_thread((Path(run_dir) / "run.json").exists)
    farm = Farm(config, OraclePolicy(), run_dir=Path(run_dir), resume=resume)
    async for _ in farm.run():
        pass
    trajectories = await (await RunDir.load(Path(run_dir))).finished()
    good = [t for t in trajectories if t.status == "completed" and t.reward > 0]
    if not good:
        raise TrainerError(f"the oracle solved none of the {len(trajectories)} demonstration episodes in "
                           f"{run_dir}; check the env with `envfarm farm run --policy oracle`")
    return trajectories


def sft_batch(samples: Sequence[TokenSample], batch_size: int, seed: int, step: int) -> list[TokenSample]:
    """The samples of SFT step ``step`` (0-based): drawn without replacement, seeded by (seed, step)."""
    if not samples:
        raise TrainerError("no SFT samples: the demonstrations rendered to nothing (all too long?)")
    rng = random.Random(f"sft:{seed}:{step}")
    return rng.sample(list(samples), min(batch_size, len(samples)))


__all__ = ["collect_demos", "sft_batch"]
