"""On a CUDA device (marker ``gpu``; skipped without one, CI never has one): the sampler and the learner in
bf16 autocast agree on log-probs with a float32 recompute, an RL update under autocast is finite and moves
the weights, and two NCCL ranks (two devices) take the single-process step."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from learner_support import TINY, params, rl_batch

from envfarm.trainer.distributed import DistContext
from envfarm.trainer.generate import generate
from envfarm.trainer.learner import Learner, LearnerConfig
from envfarm.trainer.loss import token_logprobs
from envfarm.trainer.policy import load_policy

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def test_bf16_sampling_logprobs_match_a_float32_recompute() -> None:
    policy = load_policy("tiny-cpu", overrides=TINY, seed=0, device="cuda")
    prompts = [[5, 6, 7, 8, 9], [10, 11, 12]]
    out = generate(policy, prompts, n=2, max_tokens=12, generator=torch.Generator("cuda").manual_seed(0))
    for prompt, samples in zip(prompts, out, strict=True):
        for s in samples:
            ids = torch.tensor([prompt + list(s.token_ids)], device="cuda")
            with torch.no_grad():
                lp = token_logprobs(policy.module(ids[:, :-1]).float(), ids[:, 1:])[0][len(prompt) - 1:]
            assert max(abs(a - b) for a, b in zip(lp.tolist(), s.logprobs, strict=True)) < 0.05  # bf16


def test_bf16_autocast_rl_update() -> None:
    policy = load_policy("tiny-cpu", overrides=TINY, seed=0, device="cuda")
    learner = Learner(policy.module, LearnerConfig(lr=1e-3, bf16=True), policy.tokenizer.pad_id,
                      policy.device)
    samples = rl_batch(_cpu_twin(), n=8)  # on-policy logprobs from the same weights in float32
    before = params(policy.module).clone()
    stats = learner.update(samples, "rl")
    assert torch.isfinite(torch.tensor(stats.loss)) and stats.ratio_mean == pytest.approx(1.0, abs=0.05)
    assert not torch.equal(before, params(policy.module))


def _cpu_twin() -> torch.nn.Module:
    """The seed-0 tiny model on the CPU (the same initial weights as its CUDA twin)."""
    return load_policy("tiny-cpu", overrides=TINY, seed=0, device="cpu").module


def _worker(rank: int, init: str, out: str) -> None:
    ctx = DistContext.init(rank, 2, init_method=init, device=f"cuda:{rank}")
    try:
        policy = load_policy("tiny-cpu", overrides=TINY, seed=rank, device=f"cuda:{rank}")
        learner = Learner(policy.module, LearnerConfig(lr=1e-3, bf16=False), policy.tokenizer.pad_id,
                          policy.device, dist=ctx)
        ctx.broadcast_params(learner.module)
        samples = ctx.broadcast_object(rl_batch(_cpu_twin(), n=7) if rank == 0 else None)
        learner.update(samples, "rl")
        torch.save(params(learner.module).cpu(), Path(out) / f"rank{rank}.pt")
    finally:
        ctx.close()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL data parallel needs two CUDA devices")
def test_two_nccl_ranks_end_with_the_same_weights(tmp_path: Path) -> None:
    mp.spawn(_worker, args=(f"file://{tmp_path / 'rendezvous'}", str(tmp_path)), nprocs=2, join=True)
    assert torch.equal(torch.load(tmp_path / "rank0.pt"), torch.load(tmp_path / "rank1.pt"))
