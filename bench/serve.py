"""Policy server benchmark: throughput of ``generate`` and of ``envfarm policy serve``, and hot-swap cost.

    python bench/serve.py                        # tiny-cpu on this machine's CPU (2 threads)
    python bench/serve.py --preset small --device cuda --batches 1 32 128
    python bench/serve.py --quick --out bench/results/serve.json

- generate: ``--batches`` rows, each a ToolCalc-sized prompt (the env's first observation, ~650 bytes),
  ``--max-tokens`` new tokens at temperature 1 (eos masked out so every row samples the full length).
  Reports prefill seconds, decode tokens/s (new tokens / decode seconds) and end-to-end tokens/s.
- server: the same number of concurrent HTTP requests against an in-process :class:`PolicyServer`
  (its batching window and scheduler included); tokens/s and batches used.
- swap: ``publish`` of the model's own weights to the server, median of ``--swaps`` (encode + POST + load).
- farm: ``--farm N`` ToolCalc episodes through the server (untrained model: every turn fails, 8 turns of
  growing prompts), with the prefix cache off and on; sampling seconds and the share of prompt tokens reused.
Medians of ``--repeat`` runs; a shared VM is noisy: read ratios, not absolutes (CPU seconds of this process
are reported beside wall time: they move less when neighbours load the machine).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import torch

from envfarm.trainer.generate import GenRequest, generate_batch
from envfarm.trainer.policy import Policy, load_policy
from envfarm.trainer.server import PolicyServer, ServerConfig
from envfarm.trainer.weights import publish

PROMPT = (
    "Solve this problem. Use the calc tool for the arithmetic, then submit the final number.\n\nA wall "
    "is 31 m wide and 28 m high, with a square window of side 18 m. Painting costs 8 dollars per square "
    "meter. How many dollars does it cost to paint the wall?\n\nTools:\n- calc(expr: string): Evaluate "
    "an arithmetic expression exactly and return the result.\n- submit(answer: string): Submit the final "
    "numeric answer. Ends the episode.\nCall exactly one tool per turn, as JSON: {\"name\": \"<tool>\", "
    "\"arguments\": {...}} \u2014 on its own, inside <tool_call>...</tool_call> tags, or as an OpenAI "
    "assistant message with one entry in tool_calls.")


def messages(i: int) -> list[dict[str, str]]:
    """Row i's conversation: distinct per row (identical prompts would share one prefill)."""
    return [{"role": "user", "content": PROMPT.replace("31 m", f"{31 + i} m")}]


def no_eos(policy: Policy) -> None:
    """No token ends a row: every row samples ``max_tokens`` (a random model emits eos now and then)."""
    policy.tokenizer.eos_id = -1


def bench_generate(policy: Policy, rows: int, max_tokens: int) -> dict[str, Any]:
    prompts = [policy.encode_prompt(messages(i)) for i in range(rows)]
    reqs = [GenRequest(p, max_tokens=max_tokens) for p in prompts]
    cpu0 = time.process_time()
    gen = generate_batch(policy, reqs, generator=torch.Generator(policy.device).manual_seed(0))
    cpu = time.process_time() - cpu0
    t0, cpu0 = time.perf_counter(), time.process_time()
    generate_batch(policy, [GenRequest(p, max_tokens=1) for p in prompts])
    prefill, prefill_cpu = time.perf_counter() - t0, time.process_time() - cpu0
    decode_s = max(gen.seconds - prefill, 1e-9)
    return {"rows": rows, "prompt_tokens": len(prompts[0]), "new_tokens": gen.completion_tokens,
            "seconds": gen.seconds, "prefill_s": prefill, "cpu_s": cpu, "prefill_cpu_s": prefill_cpu,
            "decode_tokens_per_s": gen.completion_tokens / decode_s,
            "decode_tokens_per_cpu_s": gen.completion_tokens / max(cpu - prefill_cpu, 1e-9),
            "tokens_per_s": gen.completion_tokens / gen.seconds}


async def bench_server(policy: Policy, rows: int, max_tokens: int, swaps: int) -> dict[str, Any]:
    async with PolicyServer(policy, ServerConfig(max_batch=max(rows, 1), threads=torch.get_num_threads())) \
            as server:
        async with aiohttp.ClientSession() as http:
            async def one(i: int) -> int:
                body = {"model": server.model_name, "messages": messages(100 + i), "max_tokens": max_tokens}
                async with http.post(server.url + "/v1/chat/completions", json=body) as resp:
                    return len((await resp.json())["choices"][0]["token_ids"])
            t0 = time.perf_counter()
            tokens = sum(await asyncio.gather(*(one(i) for i in range(rows))))
            seconds = time.perf_counter() - t0
            times, size = [], 0
            for v in range(1, swaps + 1):
                res = await publish(server.url, policy, v, session=http)
                times.append(res.seconds)
                size = res.bytes
        return {"rows": rows, "new_tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds,
                "batches": server.stats.batches, "swap_s": statistics.median(times) if times else None,
                "swap_bytes": size}


async def bench_farm(preset: str, device: str, episodes: int, backend: str, prefix_mb: int,
                     threads: int) -> dict[str, Any]:
    from envfarm.rollout import Farm, FarmConfig, make_policy

    policy = load_policy(preset, device=device)
    config = ServerConfig(max_batch=32, prefix_cache_mb=prefix_mb, threads=threads)
    async with PolicyServer(policy, config) as server:
        client = make_policy(f"openai:{server.url}/v1", max_tokens=32)
        farm_cfg = FarmConfig(env_id="envfarm/ToolCalc-v0", episodes=episodes, concurrency=episodes,
                              backend=backend)
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            async with client:
                farm = Farm(farm_cfg, client, run_dir=Path(tmp) / "run")
                turns = sum([len(t.turns) async for t in farm.run()])
        s = server.stats
        return {"prefix_cache_mb": prefix_mb, "episodes": episodes, "turns": turns,
                "wall_s": time.perf_counter() - t0, "generate_s": s.generate_s, "batches": s.batches,
                "prompt_tokens": s.prompt_tokens, "cached_tokens": s.cached_tokens}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="tiny-cpu")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--swaps", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="one repeat, 16 tokens")
    ap.add_argument("--farm", type=int, default=16, help="ToolCalc episodes of the farm arm (0: skip)")
    ap.add_argument("--farm-backend", default="local", help="sandbox backend of the farm arm")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.quick:
        args.repeat, args.max_tokens = 1, 16
    torch.set_num_threads(args.threads)
    policy = load_policy(args.preset, device=args.device)
    no_eos(policy)
    results: dict[str, Any] = {"preset": args.preset, "device": str(policy.device), "threads": args.threads,
                               "params": policy.num_params(), "max_tokens": args.max_tokens, "generate": [],
                               "server": []}
    bench_generate(policy, 1, 4)  # warm-up
    for rows in args.batches:
        runs = [bench_generate(policy, rows, args.max_tokens) for _ in range(args.repeat)]
        best = sorted(runs, key=lambda r: r["tokens_per_s"])[len(runs) // 2]
        results["generate"].append(best)
        print(f"generate  B={rows:<4} prompt={best['prompt_tokens']} prefill={best['prefill_s']:.3f}s "
              f"decode={best['decode_tokens_per_s']:.0f} tok/s end-to-end={best['tokens_per_s']:.0f} tok/s "
              f"(per CPU-second: prefill {best['prefill_cpu_s']:.3f}s, decode "
              f"{best['decode_tokens_per_cpu_s']:.0f} tok)")
        srv = asyncio.run(bench_server(policy, rows, args.max_tokens, args.swaps))
        results["server"].append(srv)
        print(f"server    B={rows:<4} {srv['tokens_per_s']:.0f} tok/s in {srv['batches']} batches; swap of "
              f"{srv['swap_bytes'] / 1e6:.1f} MB: {srv['swap_s'] * 1e3:.1f} ms")
    results["farm"] = []
    for mb in (0, 1024) if args.farm else ():
        arm = asyncio.run(bench_farm(args.preset, args.device, args.farm, args.farm_backend, mb,
                                     args.threads))
        results["farm"].append(arm)
        print(f"farm      prefix cache {mb:>4} MiB: {arm['turns']} turns, sampling {arm['generate_s']:.1f}s "
              f"(wall {arm['wall_s']:.1f}s), {arm['cached_tokens'] / max(arm['prompt_tokens'], 1):.0%} of "
              f"prompt tokens reused")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
