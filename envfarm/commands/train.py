"""``envfarm train``: SFT warm start, RL against the farm, and evaluation, in one command.

    envfarm train --env envfarm/ToolCalc-v0 --preset tiny-cpu --out runs/train-a
    envfarm train --resume runs/train-a                 # after a crash or Ctrl-C: continues, nothing lost

Starts a policy server, the farm and the learner in this process (real HTTP between them); see
``envfarm/trainer/loop.py``. Bad options exit with code 2 and one ``error:`` line.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import types
import typing
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from envfarm.commands.options import field_default, field_docs
from envfarm.errors import ConfigError
from envfarm.trainer.train_config import ENV_DEFAULTS, TrainConfig

console = Console()
err_console = Console(stderr=True)

RESUMABLE = {"rl_updates", "minutes", "sft_steps", "device", "threads", "concurrency", "eval_episodes",
             "nproc"}
"""Options that may change when a run is resumed (the rest define the run)."""
OPTION_NAMES = {"env_id": "--env"}
"""Options not named after their TrainConfig field (``--field-name``)."""
OPTION_TYPES: dict[str, type] = {"checkpoint": Path}
"""Options whose CLI type is not the field's: a folder is a Path on every command line (``policy serve
--checkpoint``), a str in the stored config."""


def _cli_type(hint: Any) -> Any:
    """The option type of a field type: Optional unwrapped, Literal and JSON objects as str."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if typing.get_origin(hint) is typing.Literal:
        return str
    if hint is dict or typing.get_origin(hint) is dict:
        return str
    return hint


def config_options() -> list[inspect.Parameter]:
    """One typer option per :class:`TrainConfig` field, named ``--field-name`` (``OPTION_NAMES``), its help
    the field's docstring plus the default; each defaults to None (not given: the config's default, or on
    ``--resume`` the stored value)."""
    docs, hints = field_docs(TrainConfig), typing.get_type_hints(TrainConfig)
    params = []
    for f in fields(TrainConfig):
        default = field_default(TrainConfig, f.name)
        name = OPTION_NAMES.get(f.name, "--" + f.name.replace("_", "-"))
        kind = OPTION_TYPES.get(f.name) or _cli_type(hints[f.name])
        decl = f"{name}/--no-{name[2:]}" if kind is bool else name
        doc = docs.get(f.name, "")
        first = doc.split(". ")[0].rstrip(".")
        shown = json.dumps(default) if isinstance(default, dict) else str(default)
        option = typer.Option(decl, help=f"{first}.", show_default=shown)
        params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                        annotation=Annotated[kind | None, option]))
    return params


def train(out: Path | None = None, resume: Path | None = None, repeats: int = 1, quiet: bool = False,
          **options: Any) -> None:
    """SFT on teacher demos; then RL (GRPO against the farm) and SFT continued with RL's compute, from the
    same SFT checkpoint; every arm evaluated greedy and sampled on the same held-out seeds."""
    from envfarm.trainer.loop import TrainProgress
    from envfarm.trainer.loop import train as run_train
    from envfarm.trainer.repeats import train_repeats

    given = {k: str(v) if isinstance(v, Path) else v for k, v in options.items() if v is not None}
    if "env_kwargs" in given:
        from envfarm.commands.farm import parse_env_kwargs

        given["env_kwargs"] = {**ENV_DEFAULTS, **parse_env_kwargs(given["env_kwargs"])}
    if resume is not None:
        if out is not None and out != resume:
            raise ConfigError("give either --out (a new run) or --resume (an existing one), not both")
        if repeats > 1:
            raise ConfigError("--repeats continues with the same --out DIR (finished runs are kept), not "
                              "--resume")
        fixed = sorted(set(given) - RESUMABLE)
        if fixed:
            raise ConfigError(f"--resume continues the stored run; these options cannot change: "
                              f"{', '.join(OPTION_NAMES.get(k, '--' + k.replace('_', '-')) for k in fixed)}")
        config = TrainConfig.load(resume).with_options(**given)
        folder = resume
    else:
        if out is None:
            raise ConfigError("--out DIR is required (or --resume DIR to continue a run)")
        config = TrainConfig().with_options(**given)
        folder = out
    progress = TrainProgress()
    if repeats > 1:
        spread = asyncio.run(_drive(train_repeats(config, folder, repeats, progress), progress, quiet))
        console.print(_repeats_table(spread.to_json(), folder))
        return
    work = run_train(config, folder, resume=resume is not None, progress=progress)
    result = asyncio.run(_drive(work, progress, quiet))
    console.print(_summary_table(result.to_json(), folder))


_OWN = [
    inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
        Path | None, typer.Option(help="Training folder to create.")]),
    inspect.Parameter("resume", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
        Path | None, typer.Option(help="Continue this training folder.")]),
    inspect.Parameter("repeats", inspect.Parameter.KEYWORD_ONLY, default=1, annotation=Annotated[
        int, typer.Option(min=1, help="Independent runs (seed, seed+1, ...) in DIR/run-<k>; their spread "
                                      "goes to DIR/repeats.json.")]),
    inspect.Parameter("quiet", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=Annotated[
        bool, typer.Option(help="No live progress.")]),
]
train.__signature__ = inspect.Signature([*_OWN, *config_options()])  # type: ignore[attr-defined]
train.__annotations__ = {p.name: p.annotation for p in train.__signature__.parameters.values()}  # type: ignore[attr-defined]


async def _drive(work: Any, progress: Any, quiet: bool) -> Any:
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
    if p.loss is not None and p.phase in ("sft", "sft_more"):
        table.add_row(f"{p.phase} loss", f"{p.loss:.4f}")
    if p.reward is not None:
        table.add_row("reward (last batch)", f"{p.reward:.3f} at v{p.version}")
    for name, value in (p.evals or {}).items():
        table.add_row(f"eval {name}", f"{value:.3f}")
    return table


def _ci(x: dict[str, Any], key: str) -> str:
    lo, hi = x["ci95"]
    return f"{x[key]:+.3f} [{lo:+.3f}, {hi:+.3f}]" if key == "diff" else f"{x[key]:.3f} [{lo:.3f}, {hi:.3f}]"


def _summary_table(summary: dict[str, Any], folder: Path) -> Table:
    modes = ["greedy", "sampled"]
    table = Table(title=f"envfarm train: {folder} ({summary['eval_episodes']} {summary['eval_split']} seeds, "
                  f"teacher {summary['teacher']['name']})")
    table.add_column("arm / difference")
    for mode in modes:
        table.add_column(f"{mode} (95% CI)")
    for arm, scores in summary["arms"].items():
        table.add_row(arm, *(_ci(scores[m], "mean") if m in scores else "-" for m in modes))
    for name in ("rl_minus_sft_more", "rl_minus_sft"):
        diffs = summary.get(name) or {}
        if diffs:
            table.add_row(name, *(_ci(diffs[m], "diff") if m in diffs else "-" for m in modes))
    table.caption = (f"wall {summary['wall_s']} s; files: {folder}/summary.json, metrics.jsonl, "
                     "reward_curve.png, checkpoints/")
    return table


def _repeats_table(spread: dict[str, Any], folder: Path) -> Table:
    table = Table(title=f"envfarm train --repeats {len(spread['runs'])}: {folder}")
    table.add_column("arm / difference")
    for mode in ("greedy", "sampled"):
        table.add_column(f"{mode}: mean ± std (min..max)")
    def cell(x: dict[str, Any] | None) -> str:
        if x is None:
            return "-"
        extra = f", CI>0 in {x['ci95_above_zero']}" if "ci95_above_zero" in x else ""
        return f"{x['mean']:.3f} ± {x['std']:.3f} ({x['min']:.3f}..{x['max']:.3f}{extra})"
    for arm, modes in spread["arms"].items():
        table.add_row(arm, cell(modes.get("greedy")), cell(modes.get("sampled")))
    for name in ("rl_minus_sft_more", "rl_minus_sft"):
        modes = spread.get(name) or {}
        if modes:
            table.add_row(name, cell(modes.get("greedy")), cell(modes.get("sampled")))
    table.caption = f"{folder}/repeats.json; each run's summary in {folder}/run-<k>/summary.json"
    return table


__all__ = ["train"]
