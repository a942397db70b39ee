"""``envfarm train``: SFT warm start, RL against the farm, and evaluation, in one command.

    envfarm train --env envfarm/ToolCalc-v0 --preset tiny-cpu --out runs/train-a
    envfarm train --resume runs/train-a                 # after a crash or Ctrl-C: continues, nothing lost

Starts a policy server, the farm and the learner in this process (real HTTP between them); see
``envfarm/trainer/loop.py``. Bad options exit with code 2 and one ``error:`` line.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from envfarm.errors import ConfigError
from envfarm.sandbox.values import DEFAULT_BACKEND

console = Console()
err_console = Console(stderr=True)

RESUMABLE = {"rl_updates", "minutes", "device", "threads", "concurrency", "eval_episodes", "nproc"}
"""Options that may change when a run is resumed (the rest define the run)."""


def train(
    env: Annotated[str | None, typer.Option("--env", help="Registered env id.")] = None,
    env_kwargs: Annotated[str | None, typer.Option(
        "--env-kwargs", help='Env arguments as JSON over {"tool_help": false}, e.g. \'{"difficulty": 2}\'.',
    )] = None,
    preset: Annotated[str | None, typer.Option(help="Built-in model preset [default: tiny-cpu].")] = None,
    checkpoint: Annotated[str | None, typer.Option(help="Start from this policy folder instead.")] = None,
    out: Annotated[Path | None, typer.Option(help="Training folder to create.")] = None,
    resume: Annotated[Path | None, typer.Option(help="Continue this training folder.")] = None,
    sft_steps: Annotated[int | None, typer.Option(min=0, help="SFT steps on oracle demos (0: none).")] = None,
    sft_demos: Annotated[int | None, typer.Option(min=1, help="Oracle demonstration episodes.")] = None,
    sft_batch: Annotated[int | None, typer.Option(min=1, help="Episodes per SFT step.")] = None,
    sft_lr: Annotated[float | None, typer.Option(help="SFT learning rate.")] = None,
    rl_updates: Annotated[int | None, typer.Option(min=0, help="RL updates (weight versions).")] = None,
    minutes: Annotated[float | None, typer.Option(help="RL phase budget [default: 8.5].")] = None,
    group_size: Annotated[int | None, typer.Option(min=2, help="Attempts per task (GRPO group).")] = None,
    prompts_per_update: Annotated[int | None, typer.Option(min=1, help="GRPO groups per update.")] = None,
    lr: Annotated[float | None, typer.Option(help="RL learning rate.")] = None,
    ppo_epochs: Annotated[int | None, typer.Option(min=1, help="Optimizer steps per RL batch.")] = None,
    loss_agg: Annotated[str | None, typer.Option(help="RL loss: sequence or token.")] = None,
    kl_coef: Annotated[float | None, typer.Option(min=0, help="k3 KL to the SFT policy (0: off).")] = None,
    max_staleness: Annotated[int | None, typer.Option(min=0, help="Max weight versions behind.")] = None,
    temperature: Annotated[float | None, typer.Option(min=0, help="Sampling temperature (RL, eval).")] = None,
    max_tokens: Annotated[int | None, typer.Option(min=1, help="Tokens per completion.")] = None,
    eval_episodes: Annotated[int | None, typer.Option(min=1, help="Held-out evaluation tasks.")] = None,
    concurrency: Annotated[int | None, typer.Option(min=1, help="Episodes in flight.")] = None,
    backend: Annotated[str | None, typer.Option(help=f"Sandbox backend [default: {DEFAULT_BACKEND}].")] \
        = None,
    device: Annotated[str | None, typer.Option(help="cpu | cuda [default: cuda when available].")] = None,
    threads: Annotated[int | None, typer.Option(min=1, help="torch threads [default: torch's].")] = None,
    nproc: Annotated[int | None, typer.Option(min=1, help="Learner processes (data parallel).")] = None,
    seed: Annotated[int | None, typer.Option(help="Model init and SFT order seed.")] = None,
    quiet: Annotated[bool, typer.Option(help="No live progress.")] = False,
) -> None:
    """SFT on oracle demos, then GRPO against the farm, then held-out evaluation of both policies."""
    from envfarm.trainer.loop import TrainProgress
    from envfarm.trainer.loop import train as run_train
    from envfarm.trainer.train_config import TrainConfig

    given: dict[str, Any] = {
        "env_id": env, "preset": preset, "checkpoint": checkpoint, "sft_steps": sft_steps,
        "sft_demos": sft_demos, "sft_batch": sft_batch, "sft_lr": sft_lr, "rl_updates": rl_updates,
        "minutes": minutes, "group_size": group_size, "prompts_per_update": prompts_per_update, "lr": lr,
        "ppo_epochs": ppo_epochs, "loss_agg": loss_agg,
        "kl_coef": kl_coef, "max_staleness": max_staleness, "temperature": temperature,
        "max_tokens": max_tokens, "eval_episodes": eval_episodes, "concurrency": concurrency,
        "backend": backend, "device": device, "threads": threads, "nproc": nproc, "seed": seed}
    given = {k: v for k, v in given.items() if v is not None}
    if env_kwargs is not None:
        from envfarm.commands.farm import parse_env_kwargs
        from envfarm.trainer.train_config import ENV_DEFAULTS

        given["env_kwargs"] = {**ENV_DEFAULTS, **parse_env_kwargs(env_kwargs)}
    if resume is not None:
        if out is not None and out != resume:
            raise ConfigError("give either --out (a new run) or --resume (an existing one), not both")
        fixed = sorted(set(given) - RESUMABLE)
        if fixed:
            raise ConfigError(f"--resume continues the stored run; these options cannot change: "
                              f"{', '.join('--' + k.replace('_', '-') for k in fixed)}")
        config = TrainConfig.load(resume).with_options(**given)
        folder = resume
    else:
        if out is None:
            raise ConfigError("--out DIR is required (or --resume DIR to continue a run)")
        config = TrainConfig().with_options(**given)
        folder = out
    progress = TrainProgress()
    work = run_train(config, folder, resume=resume is not None, progress=progress)
    summary = asyncio.run(_drive(work, progress, quiet))
    console.print(_summary_table(summary, folder))


async def _drive(work: Any, progress: Any, quiet: bool) -> dict[str, Any]:
    if quiet:
        return await work
    with Live(_progress_table(progress), console=err_console, refresh_per_second=2, transient=True) as live:
        task = asyncio.ensure_future(work)
        while not task.done():
            await asyncio.wait([task], timeout=0.5)
            live.update(_progress_table(progress))
        return task.result()


def _progress_table(p: Any) -> Table:
    table = Table(show_header=False, box=None)
    table.add_row("phase", p.phase)
    if p.total:
        table.add_row("step", f"{p.step}/{p.total}")
    if p.loss is not None and p.phase == "sft":
        table.add_row("sft loss", f"{p.loss:.4f}")
    if p.reward is not None:
        table.add_row("reward (last batch)", f"{p.reward:.3f} at v{p.version}")
    for name, value in (p.evals or {}).items():
        table.add_row(f"eval {name}", f"{value:.3f}")
    return table


def _summary_table(summary: dict[str, Any], folder: Path) -> Table:
    table = Table(title=f"envfarm train: {folder}", show_header=False)
    for key in ("eval_before_rl", "eval_after_rl", "diff", "diff_ci95", "eval_episodes", "sft_steps",
                "rl_updates", "wall_s"):
        table.add_row(key, json.dumps(summary.get(key)))
    table.add_row("files", f"{folder}/summary.json, metrics.jsonl, reward_curve.png, checkpoints/")
    return table


__all__ = ["train"]
