"""Data parallelism: two CPU processes (gloo) take one update on their halves of a batch; gradients are
summed, so both end with the same parameters, equal to one process's update on the whole batch."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.multiprocessing as mp
from learner_support import params, rl_batch, tiny_learner

from envfarm.trainer.distributed import DistContext

WORLD = 2


def _worker(rank: int, init: str, out: str) -> None:
    torch.set_num_threads(1)
    ctx = DistContext.init(rank, WORLD, init_method=init)
    try:
        learner = tiny_learner(seed=rank, lr=1e-3)  # rank 1 starts elsewhere: broadcast_params fixes it
        learner.dist = ctx
        ctx.broadcast_params(learner.module)
        samples = ctx.broadcast_object(rl_batch(learner.module, n=7) if rank == 0 else None)
        for _ in range(2):
            stats = learner.update(samples, "rl")
        torch.save({"params": params(learner.module), "loss": stats.loss, "tokens": stats.tokens},
                   Path(out) / f"rank{rank}.pt")
    finally:
        ctx.close()


def test_two_process_gloo_step_equals_single_process_step(tmp_path: Path) -> None:
    init = f"file://{tmp_path / 'rendezvous'}"
    mp.spawn(_worker, args=(init, str(tmp_path)), nprocs=WORLD, join=True)
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD))
    assert torch.equal(r0["params"], r1["params"])

    torch.set_num_threads(1)
    single = tiny_learner(seed=0, lr=1e-3)
    samples = rl_batch(single.module, n=7)
    for _ in range(2):
        stats = single.update(samples, "rl")
    assert stats.tokens == r0["tokens"]
    assert abs(stats.loss - r0["loss"]) < 1e-6
    assert torch.allclose(params(single.module), r0["params"], atol=1e-6)
