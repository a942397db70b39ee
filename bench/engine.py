"""Rollout engine benchmark: vLLM (``--engine vllm``) versus envfarm's built-in policy server on the same tiny
Hugging Face model and the same farm load; prints and writes JSON.

    python bench/engine.py                          # 128 ToolCalc episodes at concurrency 64 per engine
    python bench/engine.py --quick                  # 32 episodes, 2 updates: a smoke run
    python bench/engine.py --out bench/results/engine.json
    python bench/engine.py --model models/qwen2.5-0.5b-instruct --device cuda    # on a GPU machine (untested)

The model: the tests' tiny Qwen2 (envfarm/testing/tiny_hf.py: random init, a BPE tokenizer trained on
ToolCalc text, ChatML + Hermes tool calls), hidden 64 in 2 heads (vLLM's CPU attention needs head size >= 32).
Each engine, one after the other (never two at once):

- farm: ``--episodes`` ToolCalc episodes at ``--concurrency`` through the engine's OpenAI API, sampled at
  temperature 1 with ``--max-tokens`` per turn, as ``envfarm train`` runs them (bwrap sandboxes). An untrained
  model never solves a task: episodes run to the step limit. Completion tokens per wall second.
- sync: ``--syncs`` weight publications (POST /weights of the learner's module) while idle, and for vLLM
  also while the farm samples (a publication then waits for the requests in flight: ``drain_s``). vLLM's
  answer splits each: ``write_s`` (safetensors to disk), ``drain_s``, ``reload_s`` (reload_weights + prefix
  cache reset).
- update: ``--updates`` synchronous RL updates of ``--prompts`` x ``--group`` episodes: sampling (a farm run),
  learning (one optimizer step on every sampled turn; the advantages are synthetic +/-1 because an untrained
  model earns no reward, and an update costs the same whatever their values), sync (publication). Before
  each step the sampled logprobs are checked against the learner's recompute (logprob_check.py): the
  mismatch distribution over all updates is reported per engine.

Both engines share the machine with the farm's sandboxes; the built-in server runs in this process (as in
``envfarm train``), vLLM in its own. A shared VM is noisy: read ratios, and the load average beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import torch

from envfarm.rollout import Farm
from envfarm.rollout.openai_policy import OpenAIPolicy
from envfarm.rollout.trajectory import Trajectory
from envfarm.testing.tiny_hf import tiny_qwen2  # the tests' model builder, not a copy
from envfarm.trainer.base import VERSION_HEADER, WEIGHTS_CONTENT_TYPE
from envfarm.trainer.engines import RolloutEngine, make_engine
from envfarm.trainer.learner import Learner, learner_config
from envfarm.trainer.logprob_check import logprob_mismatch
from envfarm.trainer.policy import Policy, load_policy
from envfarm.trainer.samples import TokenSample
from envfarm.trainer.train_config import TrainConfig
from envfarm.trainer.weights import encode_state


def med(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 4) if xs else None


async def farm_run(url: str, config: TrainConfig, episodes: int, seed: int, run_dir: Path,
                   attempts: int = 1) -> tuple[list[Trajectory], float]:
    """The trajectories of one farm run against ``url`` and its wall seconds."""
    policy = OpenAIPolicy(url, temperature=config.temperature, max_tokens=config.max_tokens,
                          max_connections=config.concurrency, timeout_s=600.0)
    farm = Farm(config.farm_config(episodes=episodes, seed=seed, attempts=attempts), policy, run_dir=run_dir)
    t0 = time.perf_counter()
    trajectories = [t async for t in farm.run()]
    return trajectories, time.perf_counter() - t0


def tokens(trajectories: list[Trajectory]) -> int:
    return sum(len(turn.token_ids or ()) for t in trajectories for turn in t.turns)


async def post_weights(url: str, blob: bytes, version: int) -> dict[str, Any]:
    """POST /weights; the engine's answer plus the client's wall seconds (encode not included)."""
    t0 = time.perf_counter()
    headers = {"Content-Type": WEIGHTS_CONTENT_TYPE, VERSION_HEADER: str(version)}
    async with aiohttp.ClientSession() as s, s.post(url + "/weights", data=blob, headers=headers) as r:
        body = await r.json()
        assert r.status == 200, body
    return {**body, "client_s": time.perf_counter() - t0}


async def bench_sync(engine: RolloutEngine, policy: Policy, n: int, first: int) -> list[dict[str, Any]]:
    out = []
    for k in range(n):
        t0 = time.perf_counter()
        blob = await asyncio.to_thread(encode_state, policy.module)
        t1 = time.perf_counter()
        body = await post_weights(engine.url, blob, first + k)
        out.append({**body, "encode_s": t1 - t0, "total_s": time.perf_counter() - t0})
    return out


def sync_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("total_s", "encode_s", "client_s", "write_s", "drain_s", "reload_s")
    return {"n": len(rows), **{f"median_{k}": med([r[k] for r in rows if k in r]) for k in keys},
            "max_total_s": round(max(r["total_s"] for r in rows), 4) if rows else None}


async def sync_under_load(engine: RolloutEngine, policy: Policy, config: TrainConfig, episodes: int,
                          run_dir: Path, first: int) -> list[dict[str, Any]]:
    """Publications every second while a farm run samples from the engine."""
    work = asyncio.create_task(farm_run(engine.url, config, episodes, 7_000, run_dir))
    rows: list[dict[str, Any]] = []
    await asyncio.sleep(2.0)
    while not work.done():
        rows += await bench_sync(engine, policy, 1, first + len(rows))
        await asyncio.sleep(1.0)
    await work
    return rows


def turn_samples(trajectories: list[Trajectory]) -> list[TokenSample]:
    """Every sampled turn as a sample, advantages +/-1 by episode (see the module docstring)."""
    out = []
    for i, t in enumerate(trajectories):
        for turn in t.turns:
            if turn.token_ids and turn.prompt_token_ids and turn.logprobs:
                version = turn.weight_version if isinstance(turn.weight_version, int) else None
                out.append(TokenSample.turn(turn.prompt_token_ids, turn.token_ids, turn.logprobs,
                                            1.0 if i % 2 else -1.0, version))
    return out


async def bench_updates(engine: RolloutEngine, policy: Policy, config: TrainConfig, args: argparse.Namespace,
                        work: Path, version: int) -> dict[str, Any]:
    learner = Learner(policy.module, learner_config(config), policy.tokenizer.pad_id, policy.device)
    rows, checks = [], []
    for k in range(args.updates):
        seed = 9_000 + k * 100
        trajectories, sampling_s = await farm_run(engine.url, config, args.prompts * args.group, seed,
                                                  work / f"update-{k}", attempts=args.group)
        samples = turn_samples(trajectories)
        check = await asyncio.to_thread(logprob_mismatch, learner.module,
                                        [s for s in samples if s.version == version], learner.pad_id,
                                        learner.device)
        if check is not None:
            checks.append(check)
        stats = await asyncio.to_thread(learner.update, samples, "rl")
        version += 1
        t0 = time.perf_counter()
        blob = await asyncio.to_thread(encode_state, learner.module)
        body = await post_weights(engine.url, blob, version)
        sync_s = time.perf_counter() - t0
        rows.append({"sampling_s": round(sampling_s, 3), "learning_s": round(stats.seconds, 3),
                     "sync_s": round(sync_s, 4), "reload_s": body.get("reload_s"),
                     "completion_tokens": tokens(trajectories), "samples": len(samples)})
    split = {k: med([r[k] for r in rows]) for k in ("sampling_s", "learning_s", "sync_s")}
    total = sum(v for v in split.values() if v)
    return {"per_update": rows, "median": split,
            "share": {k: round(v / total, 3) for k, v in split.items() if v and total},
            "logprob_mismatch": mismatch_summary(checks)}


def mismatch_summary(checks: list[Any]) -> dict[str, Any] | None:
    if not checks:
        return None
    n = sum(c.tokens for c in checks)
    return {"tokens": n, "mean_abs": sum(c.mean_abs * c.tokens for c in checks) / n,
            "p99_max_over_updates": max(c.p99 for c in checks), "max": max(c.max for c in checks),
            "per_update": [c.to_json() for c in checks]}


async def bench_engine(name: str, model: Path, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    config = TrainConfig(engine=name, checkpoint=str(model), concurrency=args.concurrency,  # type: ignore[arg-type]
                         max_tokens=args.max_tokens, max_batch=args.concurrency)
    policy = load_policy(path=model, device=args.device)
    engine = make_engine(name, policy, version=0, max_batch=args.concurrency, max_tokens=args.max_tokens,
                         seed=0, workdir=work / "engine")
    t0 = time.perf_counter()
    await engine.start("127.0.0.1", 0)
    out: dict[str, Any] = {"start_s": round(time.perf_counter() - t0, 1)}
    try:
        trajectories, wall = await farm_run(engine.url, config, args.episodes, 5_000, work / "farm")
        n = tokens(trajectories)
        out["farm"] = {"episodes": len(trajectories), "turns": sum(len(t.turns) for t in trajectories),
                       "completion_tokens": n, "wall_s": round(wall, 2), "tokens_per_s": round(n / wall, 1),
                       "load_avg": os.getloadavg()[0]}
        idle = await bench_sync(engine, policy, args.syncs, 1)
        out["sync_idle"] = sync_summary(idle)
        busy = await sync_under_load(engine, policy, config, args.episodes // 2, work / "farm-busy",
                                     1 + args.syncs)
        out["sync_under_load"] = sync_summary(busy)
        version = int(str(engine.version))
        out["update"] = await bench_updates(engine, policy, config, args, work, version)
    finally:
        await engine.stop()
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-engine-") as tmp:
        root = Path(tmp)
        model = args.model or tiny_qwen2(root / "model", hidden_size=64, heads=2)
        params = sum(p.numel() for p in load_policy(path=model, device="cpu").module.parameters())
        tiny = {"kind": "Qwen2 (random init)", "params": params, "hidden": 64, "heads": 2, "layers": 2}
        result: dict[str, Any] = {
            "model": {"kind": str(args.model), "params": params} if args.model else tiny,
            "load": {"episodes": args.episodes, "concurrency": args.concurrency,
                     "max_tokens": args.max_tokens, "temperature": 1.0, "env": "envfarm/ToolCalc-v0",
                     "backend": TrainConfig().backend},
            "machine": {"cpus": os.cpu_count(), "learner_device": args.device or "auto",
                        "load_avg_start": os.getloadavg()[0],
                        "torch_threads": torch.get_num_threads()},
        }
        for name in args.engines:
            print(f"== {name}", flush=True)
            result[name] = await bench_engine(name, model, args, root / name)
            print(json.dumps(result[name], indent=1)[:3000], flush=True)
        if "vllm" in result and "builtin" in result:
            result["vllm_over_builtin_tokens_per_s"] = round(
                result["vllm"]["farm"]["tokens_per_s"] / result["builtin"]["farm"]["tokens_per_s"], 2)
        result["machine"]["load_avg_end"] = os.getloadavg()[0]
        return result


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engines", nargs="+", default=["builtin", "vllm"], choices=["builtin", "vllm"])
    ap.add_argument("--episodes", type=int, default=128)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--syncs", type=int, default=10)
    ap.add_argument("--updates", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--quick", action="store_true", help="32 episodes, 3 syncs, 2 updates of 4 x 4")
    ap.add_argument("--model", type=Path, help="a local Hugging Face model folder instead of the tiny Qwen2 "
                    "(a real-sized model on a GPU machine: .venv-vllm then holds the CUDA build)")
    ap.add_argument("--device", default=None, help="the learner's device (cpu, cuda) [default: cuda if any]")
    ap.add_argument("--out", type=Path, default=Path("bench/results/engine.json"))
    args = ap.parse_args(argv)
    if args.quick:
        args.episodes, args.syncs, args.updates, args.prompts, args.group = 32, 3, 2, 4, 4
    result = asyncio.run(run(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("builtin", "vllm")}, indent=2))
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
