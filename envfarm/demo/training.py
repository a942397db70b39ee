"""Demo part 5: the trainer end to end at toy scale: a few GRPO updates of the 0.84M-parameter ``tiny-cpu``
model against the farm (policy server, farm and learner in this process, real HTTP between them), both arms
evaluated, ``reward_curve.png`` written.

RL starts from the bundled SFT policy (``BUNDLED_POLICY``: ToolCalc demonstrations to a held-out match of
0.61), so the attempts of a group score differently and every update has an advantage to learn from. From
a random init the model needs a few thousand SFT steps on 2 cores before it stops miscopying the numbers of a
ToolCalc question (``TrainConfig.sft_steps``); ``DemoConfig.train_checkpoint=None`` (``envfarm demo
--train-from-scratch``) runs a short SFT warm start instead, whose rewards are all 0, so its updates take no
optimizer step (the learner says so). ``envfarm train --env envfarm/ToolCalc-v0 --out runs/train`` is the
full run (about 25 minutes).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from envfarm.trainer.loop import TrainProgress, train
from envfarm.trainer.metrics import read_metrics
from envfarm.trainer.train_config import TrainConfig

from .result import BUNDLED_POLICY, DemoConfig, PartResult, Progress

COLUMNS = ("phase", "step", "loss", "mean reward", "episodes", "optimizer step")
FULL_RUN = "envfarm train --env envfarm/ToolCalc-v0 --out runs/train"


def train_config(config: DemoConfig) -> TrainConfig:
    """The toy-scale run: GRPO from ``config.train_checkpoint`` (or, when None, after ``config.sft_steps``
    SFT steps on a few demonstrations, no held-out checks) with 4 tasks x 4 attempts per update for
    ``config.rl_updates`` updates or ``config.train_seconds``, no sft_more arm, 8 evaluation episodes per
    arm and mode (the machinery, not a measurement). Each update waits for 4 informative groups among up to
    16 (dynamic sampling): the bundled policy's attempts at one task mostly score alike (8 groups in 11
    over a few runs), so plain 4-group batches left both updates of a short run without an optimizer step
    about once in 20 runs; now all 16 alike has odds of about 0.3%."""
    start = None if config.train_checkpoint is None else str(config.train_checkpoint)
    sft_steps = 0 if start else config.sft_steps
    return TrainConfig(
        env_id="envfarm/ToolCalc-v0", backend=config.backend, threads=config.threads, checkpoint=start,
        sft_demos=32, sft_steps=sft_steps, sft_target=0.0, sft_held_out=4,
        sft_check_every=max(sft_steps, 1), rl_updates=config.rl_updates, minutes=config.train_seconds / 60,
        group_size=4, prompts_per_update=4, group_window=4.0, concurrency=16,
        sft_more=False, eval_episodes=8, eval_split="validation", max_staleness=config.rl_updates)


def metric_rows(records: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """The table: SFT's first and last step, every RL update, every evaluation."""
    sft = [r for r in records if r.get("kind") == "update" and r.get("phase") == "sft"]
    rl = [r for r in records if r.get("kind") == "update" and r.get("phase") == "rl"]
    evals = [r for r in records if r.get("kind") == "eval"]
    rows: list[tuple[str, ...]] = [("sft", str(r["step"]), f"{r['loss']:.3f}", "-", "-", "yes")
            for r in (sft[:1] + sft[-1:] if len(sft) > 1 else sft)]
    for r in rl:
        reward = "-" if r.get("reward_mean") is None else f"{r['reward_mean']:.3f}"
        rows.append(("rl (GRPO)", str(r["step"]), f"{r['loss']:.3f}", reward, str(r.get("episodes", "-")),
                     "no (all rewards alike)" if r.get("skipped") else "yes"))
    rows += [(f"eval {r['phase']}", "-", "-", f"{r['mean_reward']:.3f}", str(r["episodes"]), "-")
             for r in evals]
    return rows


async def _watch(state: TrainProgress, progress: Progress, config: TrainConfig) -> None:
    while True:
        label = f"training: {state.phase}"
        total = state.total or (config.rl_updates if state.phase == "rl" else 0)
        progress(label[:40], state.step, max(total, state.step, 1))
        await asyncio.sleep(0.5)


async def training_part(config: DemoConfig, out: Path, progress: Progress) -> PartResult:
    """Run the toy-scale training into ``out/train``; the part is ok when every update ran (with or
    without an optimizer step) and the reward curve was written."""
    start = time.monotonic()
    tc = train_config(config)
    folder = out / "train"
    state = TrainProgress()
    watcher = asyncio.create_task(_watch(state, progress, tc))
    try:
        result = await train(tc, folder, progress=state)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    records = await asyncio.to_thread(read_metrics, folder / "metrics.jsonl")
    png = folder / "reward_curve.png"
    updates = [r for r in records if r.get("kind") == "update" and r.get("phase") == "rl"]
    title = ("5. training: a short SFT warm start, then GRPO on ToolCalc (tiny-cpu model)" if tc.checkpoint
             is None else f"5. training: GRPO on ToolCalc from {_policy_name(config)}")
    notes = _notes(config, tc, updates, result.phase_s.get("rl", 0.0), folder)
    return PartResult("training", title, COLUMNS, tuple(metric_rows(records)),
                      bool(updates) and png.is_file(), time.monotonic() - start, notes)


def _notes(config: DemoConfig, tc: TrainConfig, updates: list[dict[str, Any]], rl_s: float,
           folder: Path) -> tuple[str, ...]:
    """Where the curve is, how many updates stepped, where RL started and the full run's command."""
    stepped = sum(1 for r in updates if not r.get("skipped"))
    notes = [f"reward curve: {folder / 'reward_curve.png'} (left: each update's mean reward and the "
             "evaluations; right: SFT loss)",
             f"{len(updates)} GRPO updates in {rl_s:.0f} s, {stepped} with an optimizer step; files: "
             f"{folder}/ (metrics.jsonl, summary.json, checkpoints/)"]
    if tc.checkpoint is None:
        notes.append(f"toy scale: {tc.sft_steps} SFT steps teach the 0.84M model the call format, not yet to "
                     "copy the numbers, so its rewards are 0 and GRPO has no advantage to learn from (no "
                     "optimizer step); without --train-from-scratch RL starts from the bundled SFT policy")
    elif config.train_checkpoint == BUNDLED_POLICY:
        notes.append("RL started from the bundled SFT policy (envfarm/demo/policy: held-out match 0.61); "
                     "a few updates move the reward little: they show the loop, not a gain")
    notes.append(f"the full run: `{FULL_RUN}` (~25 min on 2 cores: SFT to its target, then RL above "
                 "equal-compute SFT); `--train-checkpoint runs/train/checkpoints/sft/policy` starts this "
                 "part from its SFT")
    return tuple(notes)


def _policy_name(config: DemoConfig) -> str:
    bundled = config.train_checkpoint == BUNDLED_POLICY
    return "the bundled SFT policy" if bundled else str(config.train_checkpoint)


__all__ = ["FULL_RUN", "metric_rows", "train_config", "training_part"]
