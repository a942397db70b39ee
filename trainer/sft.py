"""Warm start: teacher demonstrations from the farm, then supervised fine-tuning on them.

    demos = await collect_demos(config.farm_config(episodes=2000, seed=1_000_000), run_dir,
                                make_teacher("noisy", error=0.6))
    samples = sft_samples(demos, policy)                 # samples.py: rendered with the policy's template
    batch = sft_batch(samples, batch_size=16, seed=0, step=k)

Demonstrations are ordinary farm episodes of the in-process teacher policy (teacher.py: the env's reference
solution, or a noisy teacher that makes the env's systematic mistake in a fraction of them), in their own
run folder (so an interrupted collection resumes). Every completed demonstration is imitated, right or
wrong: SFT copies its teacher, mistakes included; only RL sees the reward. The batch of SFT step k is a
function of (seed, k) alone: a resumed run trains on exactly the batches an uninterrupted one would.

How long to fine-tune: on ToolCalc the success of a small model jumps from ~0 to ~0.8 within ~100 steps, at
a step that depends on the seed, so a fixed step count is fragile. :func:`greedy_match` measures the
fraction of held-out demonstrations (demo seeds the SFT never trains on) that greedy decoding reproduces
token for token (teacher-forced argmax on every completion token); the loop stops SFT once it reaches
``sft_target`` of what greedy decoding can reproduce of its teacher (``TrainConfig.greedy_ceiling``).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from pathlib import Path

import torch

from envfarm.errors import TrainerError
from envfarm.rollout.farm import Farm, FarmConfig
from envfarm.rollout.policies import Policy
from envfarm.rollout.runs import RunDir
from envfarm.rollout.trajectory import Trajectory

from .samples import TokenSample, micro_batches


async def collect_demos(config: FarmConfig, run_dir: Path, teacher: Policy) -> list[Trajectory]:
    """Play ``config.episodes`` episodes of ``teacher`` (or finish an interrupted collection in ``run_dir``)
    and return every trajectory of the run."""
    resume = await asyncio.to_thread((Path(run_dir) / "run.json").exists)
    farm = Farm(config, teacher, run_dir=Path(run_dir), resume=resume)
    async for _ in farm.run():
        pass
    trajectories = await (await RunDir.load(Path(run_dir))).finished()
    if not any(t.status == "completed" for t in trajectories):
        raise TrainerError(f"the {teacher.name} teacher completed none of the {len(trajectories)} "
                           f"demonstration episodes in {run_dir}; check the env with `envfarm farm run "
                           "--policy oracle`")
    return trajectories


def sft_batch(samples: Sequence[TokenSample], batch_size: int, seed: int, step: int) -> list[TokenSample]:
    """The samples of SFT step ``step`` (0-based): drawn without replacement, seeded by (seed, step)."""
    if not samples:
        raise TrainerError("no SFT samples: the demonstrations rendered to nothing (all too long?)")
    rng = random.Random(f"sft:{seed}:{step}")
    return rng.sample(list(samples), min(batch_size, len(samples)))


def completed_demos(demos: Sequence[Trajectory]) -> list[Trajectory]:
    """The demonstrations SFT imitates, in episode order: every completed one, whatever its reward (the
    teacher's mistakes included; broken episodes left out)."""
    return sorted((t for t in demos if t.status == "completed"), key=lambda t: t.index)


def greedy_match(module: torch.nn.Module, samples: Sequence[TokenSample], pad_id: int,
                 device: torch.device | str, max_tokens: int = 16384) -> float:
    """Fraction of ``samples`` whose every completion token is the model's argmax given the demonstration so
    far (what greedy decoding would reproduce). Blocking."""
    if not samples:
        return 0.0
    hits = torch.zeros((), device=device)
    was_training = module.training
    module.eval()
    with torch.inference_mode():
        for batch in micro_batches(samples, pad_id, max_tokens, device):
            pred = module(batch.input_ids).argmax(-1)
            ok = (pred == batch.targets) | (batch.mask == 0)
            hits += ok.all(dim=1).sum()
    module.train(was_training)
    return float(hits.item()) / len(samples)


__all__ = ["collect_demos", "completed_demos", "greedy_match", "sft_batch"]
