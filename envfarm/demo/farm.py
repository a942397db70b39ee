"""Demo parts 1 and 2: the rollout farm plays the tool-use envs with the oracle policy; hostile commands are
contained without harming the sandbox they ran in."""

from __future__ import annotations

import time
from pathlib import Path

from envfarm.errors import FarmError
from envfarm.rollout import Farm, FarmConfig, OraclePolicy, Summary
from envfarm.sandbox import Backend, Limits, get_backend

from .result import DemoConfig, PartResult, Progress

ENVS = ("envfarm/ToolCalc-v0", "envfarm/SqlQuery-v0", "envfarm/FileOps-v0", "envfarm/OrderDesk-v0")
HOSTILE = {
    "fork bomb": (":(){ :|:& };:", Limits(pids=64, timeout_s=5), "64 processes, 5 s"),
    "memory hog": ("python3 -c 'b = bytearray(1 << 30)'", Limits(memory_mb=128), "128 MiB"),
    "runaway": ("sleep 600", Limits(timeout_s=1), "1 s"),
}
FARM_COLUMNS = ("env", "episodes", "failed", "infra errors", "mean reward", "steps/s", "max in flight")


async def farm_env(env_id: str, config: DemoConfig, run_dir: Path, progress: Progress) -> Summary:
    """Play ``config.episodes`` oracle episodes of ``env_id``; trajectories and summary go to ``run_dir``."""
    farm_config = FarmConfig(env_id, config.episodes, concurrency=config.concurrency, backend=config.backend,
                             step_slots=4)
    farm = Farm(farm_config, OraclePolicy(), run_dir=run_dir, summary_path=run_dir / "summary.json")
    label = env_id.removeprefix("envfarm/")
    done = 0
    progress(label, 0, config.episodes)
    async for _ in farm.run():
        done += 1
        progress(label, done, config.episodes)
    return farm.summary()


def farm_row(s: Summary) -> tuple[str, ...]:
    reward = "-" if s.mean_reward is None else f"{s.mean_reward:.3f}"
    return (s.env_id.removeprefix("envfarm/"), str(s.episodes_completed), str(s.episodes_failed),
            str(s.infra_errors), reward, f"{s.steps_per_s:.0f}", str(s.max_concurrent))


def farm_ok(s: Summary) -> bool:
    """Every episode finished and the oracle earned full reward in each."""
    return not s.episodes_failed and s.episodes_completed > 0 and (s.mean_reward or 0.0) >= 1.0


async def farm_part(config: DemoConfig, out: Path, progress: Progress) -> PartResult:
    """Part 1: the four tool-use envs in the farm, one after the other, many episodes in flight in each."""
    start = time.monotonic()
    summaries = [await farm_env(env, config, out / f"farm-{env.removeprefix('envfarm/')}", progress)
                 for env in ENVS]
    notes = (f"{config.episodes} oracle episodes per env, up to {config.concurrency} in flight in warm "
             f"{config.backend} sandboxes; trajectories: {out}/farm-<env>/spool.jsonl",)
    return PartResult("farm", f"1. rollout farm: tool-use envs, oracle policy, {config.backend} sandboxes",
                      FARM_COLUMNS, tuple(farm_row(s) for s in summaries), all(map(farm_ok, summaries)),
                      time.monotonic() - start, notes)


async def contain(backend: Backend) -> dict[str, tuple[str, bool]]:
    """Run each hostile command in its own sandbox: what stopped it, and whether the sandbox survived."""
    out = {}
    for name, (cmd, limits, _) in HOSTILE.items():
        async with backend.open(limits=limits) as sb:
            res = await sb.exec(cmd)
            after = await sb.exec("echo alive")
        how = "timeout" if res.timed_out else f"exit {res.exit_code}"
        if "Resource temporarily unavailable" in res.stderr:
            how += ", pids cap hit"
        elif res.exit_code == -9 and not res.timed_out:
            how += ", OOM-killed"
        alive = after.stdout.strip() == "alive"
        out[name] = (f"{how}; sandbox {'alive' if alive else 'DEAD'}", alive)
    return out


async def containment_part(config: DemoConfig, progress: Progress) -> PartResult:
    """Part 2: a fork bomb, a memory hog and a runaway, each capped; no sandbox left behind afterwards."""
    start = time.monotonic()
    backend = get_backend(config.backend)
    try:
        await backend.check()
        progress("containment", 0, len(HOSTILE))
        hostile = await contain(backend)
        progress("containment", len(HOSTILE), len(HOSTILE))
    finally:
        await backend.aclose()
    leaked = await backend.gc()
    if backend.live or leaked:
        raise FarmError(f"{config.backend}: {backend.live + leaked} sandboxes were left behind")
    rows = tuple((name, HOSTILE[name][2], text) for name, (text, _) in hostile.items())
    return PartResult("containment", f"2. hostile commands in {config.backend} sandboxes",
                      ("attack", "cap", "outcome"), rows, all(alive for _, alive in hostile.values()),
                      time.monotonic() - start, ("every sandbox closed; none left behind (backend gc)",))
