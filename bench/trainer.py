"""Learner benchmark: update throughput, weight publication, and synchronous vs asynchronous RL.

    python bench/trainer.py                                   # tiny-cpu on this machine's CPU
    python bench/trainer.py --checkpoint runs/t/checkpoints/sft/policy --updates 4   # RL timing, SFT'd policy
    python bench/trainer.py --preset small --device cuda --skip-rl                   # GPU: tokens/s and MFU

- learner: RL (PPO-clip) and SFT optimizer steps on ToolCalc-sized samples (two turns of ~650 + ~75 tokens
  packed into one sequence, as the farm produces them); tokens/s counts every token through forward and
  backward (padding included), samples/s counts episodes. On CUDA also MFU: 6 x params x tokens (+ the
  attention term) over the device's bf16 dense peak.
- publish: ``POST /weights`` to an in-process policy server, median MB/s over ``--publishes``.
- rl: the same number of updates twice on bwrap with the policy server, over real HTTP: ``sync`` runs
  the farm for one update's episodes, then updates while the farm is idle; ``async`` (what ``envfarm train``
  does) keeps the farm sampling during updates (staleness <= 1). Wall time of each.
- ``--arms DIR``: instead of the above, ``envfarm train --repeats N`` with the defaults and ``--set
  name=value`` (JSON values) into DIR: the three arms of every run, their spread, and the load average
  sampled every 30 s during the runs, written to ``--out`` (default bench/results/trainer_arms.json)::

      python bench/trainer.py --arms runs/arms-noisy --set teacher='"noisy"' --repeats 3

Prints a JSON object and writes it to ``--out`` (default bench/results/trainer.json). Shared machines are
noisy: the load average is recorded next to the figures.
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

import torch

from envfarm.sandbox.values import DEFAULT_BACKEND
from envfarm.trainer.learner import Learner, LearnerConfig
from envfarm.trainer.policy import Policy, clone_policy, load_policy
from envfarm.trainer.samples import TokenSample
from envfarm.trainer.server import PolicyServer, ServerConfig
from envfarm.trainer.weights import encode_state, publish

PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0}


def episode_samples(n: int, vocab: int, seed: int = 0) -> list[TokenSample]:
    """``n`` packed two-turn episodes of ToolCalc's size with behaviour logprobs and +/- advantages."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        p1, c1, p2, c2 = 650 + i % 40, 75, 12, 20
        ids = tuple(torch.randint(0, min(vocab, 256), (p1 + c1 + p2 + c2,), generator=g).tolist())
        spans = ((p1, p1 + c1), (p1 + c1 + p2, len(ids)))
        lps = tuple((-torch.rand(c1 + c2, generator=g)).tolist())
        out.append(TokenSample(ids, spans, lps, advantage=1.0 if i % 2 else -1.0, version=0))
    return out


def bench_learner(policy: Policy, batch: int, steps: int, kind: str) -> dict[str, Any]:
    learner = Learner(policy.module, LearnerConfig(lr=1e-4, micro_batch_tokens=16384),
                      policy.tokenizer.pad_id, policy.device)
    samples = episode_samples(batch, policy.tokenizer.vocab_size)
    learner.update(samples, kind)  # warm-up
    if policy.device.type == "cuda":
        torch.cuda.synchronize()
    t0, padded, targets = time.perf_counter(), 0, 0
    for _ in range(steps):
        stats = learner.update(samples, kind)
        padded, targets = padded + stats.padded_tokens, targets + stats.tokens
    if policy.device.type == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    out = {"kind": kind, "batch_episodes": batch, "steps": steps, "seconds_per_step": round(dt / steps, 3),
           "tokens_per_s": round(padded / dt), "completion_tokens_per_s": round(targets / dt),
           "samples_per_s": round(batch * steps / dt, 2)}
    out["mfu"] = mfu(policy, padded / dt)
    return out


def mfu(policy: Policy, tokens_per_s: float) -> float | None:
    """Model FLOPs utilisation on CUDA (None on CPU): (6 N + 12 L d T) FLOPs per token over the peak."""
    if policy.device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(policy.device)
    peak = next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
    if peak is None:
        return None
    cfg = policy.spec.config
    n = sum(p.numel() for p in policy.module.parameters())
    per_token = 6 * n + 12 * int(cfg.get("n_layers", 0)) * int(cfg.get("d_model", 0)) * 800
    return round(per_token * tokens_per_s / (peak * 1e12), 4)


async def bench_publish(policy: Policy, repeats: int) -> dict[str, Any]:
    server = PolicyServer(clone_policy(policy), ServerConfig(max_batch=8))
    url = await server.start("127.0.0.1", 0)
    try:
        results = [await publish(url, policy.module, v + 1) for v in range(repeats)]
    finally:
        await server.stop()
    size = len(encode_state(policy.module))
    seconds = statistics.median(r.seconds for r in results)
    return {"bytes": size, "median_seconds": round(seconds, 4), "mb_per_s": round(size / seconds / 1e6, 1),
            "repeats": repeats}


async def bench_rl(policy: Policy, updates: int, prompts: int, group: int, backend: str) -> dict[str, Any]:
    from envfarm.trainer.loop import train
    from envfarm.trainer.train_config import TrainConfig

    out: dict[str, Any] = {"updates": updates, "prompts_per_update": prompts, "group_size": group}
    for mode in ("sync", "async"):
        with tempfile.TemporaryDirectory(prefix=f"bench-rl-{mode}-") as tmp:
            folder = Path(tmp) / "policy"
            from envfarm.trainer.policy import save_policy

            save_policy(policy, folder)
            config = TrainConfig(checkpoint=str(folder), sft_steps=0, rl_updates=updates,
                                 prompts_per_update=prompts, group_size=group, eval_episodes=1,
                                 backend=backend, sync=mode == "sync", concurrency=prompts * group,
                                 max_batch=prompts * group, sft_more=False)
            t0 = time.perf_counter()
            result = await train(config, Path(tmp) / "run")
            out[f"{mode}_rl_s"] = result.phase_s.get("rl")
            out[f"{mode}_total_s"] = round(time.perf_counter() - t0, 1)
    if out.get("sync_rl_s") and out.get("async_rl_s"):
        out["async_speedup"] = round(out["sync_rl_s"] / out["async_rl_s"], 2)
    return out


async def bench_arms(folder: Path, repeats: int, options: dict[str, Any]) -> dict[str, Any]:
    """``envfarm train --repeats``: every run's summary, the spread, and the load while they ran."""
    from envfarm.trainer.repeats import train_repeats
    from envfarm.trainer.train_config import TrainConfig

    loads: list[float] = []

    async def sample_load() -> None:
        while True:
            loads.append(round(os.getloadavg()[0], 2))
            await asyncio.sleep(30)

    sampler = asyncio.create_task(sample_load())
    t0 = time.perf_counter()
    try:
        spread = await train_repeats(TrainConfig().with_options(**options), folder, repeats)
    finally:
        sampler.cancel()
    runs = [json.loads((folder / name / "summary.json").read_text()) for name in spread.runs]
    keep = ("arms", "rl_minus_sft_more", "rl_minus_sft", "compute", "phase_s", "wall_s", "sft_steps",
            "sft_held_out_match", "teacher", "eval_split", "seeds", "load_avg_end")
    return {"folder": str(folder), "options": options, "wall_s": round(time.perf_counter() - t0, 1),
            "load_1min": {"min": min(loads), "mean": round(statistics.fmean(loads), 2), "max": max(loads),
                          "samples": len(loads)},
            "cpus": os.cpu_count(), "spread": spread.to_json(),
            "runs": [{k: r.get(k) for k in keep} for r in runs]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="tiny-cpu")
    ap.add_argument("--checkpoint", default=None, help="policy folder for the RL timing (an SFT'd one)")
    ap.add_argument("--device", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16, help="episodes per learner step")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--publishes", type=int, default=5)
    ap.add_argument("--updates", type=int, default=3, help="RL updates per mode (sync/async)")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--backend", default=DEFAULT_BACKEND)
    ap.add_argument("--skip-rl", action="store_true")
    ap.add_argument("--out", type=Path, default=None,
                    help="default: bench/results/trainer.json (trainer_arms.json with --arms)")
    ap.add_argument("--arms", type=Path, default=None, help="train the three arms into this folder")
    ap.add_argument("--repeats", type=int, default=1, help="--arms: independent runs")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=JSON",
                    help="--arms: a TrainConfig option, e.g. --set teacher='\"noisy\"' --set minutes=4")
    args = ap.parse_args(argv)
    results = Path(__file__).parent / "results"
    if args.arms is not None:
        options = {k: json.loads(v) for k, v in (x.split("=", 1) for x in args.set)}
        arms = asyncio.run(bench_arms(args.arms, args.repeats, options))
        out = args.out or results / "trainer_arms.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(arms, indent=2) + "\n")
        print(json.dumps(arms, indent=2))
        return
    args.out = args.out or results / "trainer.json"
    torch.set_num_threads(args.threads)
    policy = load_policy(None if args.checkpoint else args.preset, path=args.checkpoint, device=args.device)
    result: dict[str, Any] = {"preset": args.preset, "checkpoint": args.checkpoint,
                              "device": str(policy.device), "params": policy.num_params(),
                              "threads": torch.get_num_threads(),
                              "load_avg_start": [round(x, 2) for x in os.getloadavg()]}
    result["learner_rl"] = bench_learner(clone_policy(policy), args.batch, args.steps, "rl")
    result["learner_sft"] = bench_learner(clone_policy(policy), args.batch, args.steps, "sft")
    result["publish"] = asyncio.run(bench_publish(policy, args.publishes))
    if not args.skip_rl:
        result["rl"] = asyncio.run(bench_rl(policy, args.updates, args.prompts, args.group, args.backend))
    result["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
