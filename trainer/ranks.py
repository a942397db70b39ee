"""``envfarm train --nproc N``: one learner per process, data parallel; rank 0 runs everything else.

    rank 0 (the loop: server, farm, inbox)          ranks 1..N-1 (spawned, learner only)
    leader = Leader(learner, ctx)                    follow(learner, ctx)
    leader.sync()        ── weights, optimizer ──▶   same state
    leader.update(samples, "rl")  ── samples ──▶     learner.update(samples, "rl")    (each takes its shard;
                                                                                      gradients summed)
    leader.stop()        ── stop ──────────────▶    return

Messages go with ``broadcast_object`` on the same process group the gradients use, so every rank runs the
same sequence of collectives. On CPU the group is gloo, on CUDA nccl with rank r on ``cuda:r``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import torch

from .distributed import DistContext
from .learner import Kind, Learner, UpdateStats, learner_config
from .samples import TokenSample

log = logging.getLogger(__name__)


class Leader:
    """Rank 0's learner calls, mirrored on every other rank (see the module docstring)."""

    def __init__(self, learner: Learner, ctx: DistContext) -> None:
        self.learner = learner
        self.ctx = ctx

    def update(self, samples: Sequence[TokenSample], kind: Kind, lr: float | None = None) -> UpdateStats:
        if self.ctx.active:
            self.ctx.broadcast_object(("update", (list(samples), kind, lr)))
        return self.learner.update(samples, kind, lr)

    def sync(self) -> None:
        """Every rank takes rank 0's weights, optimizer state and step (after a checkpoint was loaded)."""
        if self.ctx.active:
            self.ctx.broadcast_object(("state", _state(self.learner)))

    def reset_optimizer(self) -> None:
        if self.ctx.active:
            self.ctx.broadcast_object(("reset", None))
        self.learner.reset_optimizer()

    def reset_reference(self, state: Mapping[str, torch.Tensor] | None = None) -> None:
        """Every rank's KL reference becomes its current weights (or ``state``)."""
        if self.ctx.active:
            self.ctx.broadcast_object(("reference", state))
        self.learner.reset_reference(state)

    def stop(self) -> None:
        if self.ctx.active:
            self.ctx.broadcast_object(("stop", None))


def follow(learner: Learner, ctx: DistContext) -> int:
    """Apply rank 0's messages until it says stop; returns the number of updates taken."""
    updates = 0
    while True:
        kind, payload = cast(tuple[str, Any], ctx.broadcast_object(None))
        if kind == "stop":
            return updates
        if kind == "update":
            samples, what, lr = payload
            learner.update(samples, what, lr)
            updates += 1
        elif kind == "state":
            module_state, optimizer_state, step = payload
            learner.module.load_state_dict(module_state)
            learner.optimizer.load_state_dict(optimizer_state)
            learner.step = step
        elif kind == "reset":
            learner.reset_optimizer()
        elif kind == "reference":
            learner.reset_reference(payload)


def follower_main(rank: int, world: int, init_method: str, config: dict[str, Any],
                  threads: int | None) -> None:
    """Entry point of a spawned rank (``torch.multiprocessing``): build the learner, follow rank 0."""
    from .policy import load_policy
    from .train_config import TrainConfig

    if threads:
        torch.set_num_threads(threads)
    c = TrainConfig(**config)
    device = _rank_device(c.device, rank)
    policy = load_policy(c.preset if c.checkpoint is None else None, path=c.checkpoint, device=device,
                         seed=c.seed)
    ctx = DistContext.init(rank, world, init_method, device=policy.device)
    try:
        learner = Learner(policy.module, learner_config(c), policy.tokenizer.pad_id, policy.device, dist=ctx)
        updates = follow(learner, ctx)
        log.info("rank %d: %d updates", rank, updates)
    finally:
        ctx.close()


def _rank_device(device: str | None, rank: int) -> str | None:
    if device is None and torch.cuda.is_available():
        return f"cuda:{rank % torch.cuda.device_count()}"
    if device is not None and device.startswith("cuda") and ":" not in device:
        return f"cuda:{rank % torch.cuda.device_count()}"
    return device


def _state(learner: Learner) -> tuple[dict[str, torch.Tensor], dict[str, Any], int]:
    module_state = {k: v.detach().cpu() for k, v in learner.module.state_dict().items()}
    return module_state, learner.optimizer.state_dict(), learner.step


def start_followers(world: int, out: Path, config: dict[str, Any],
                    threads: int | None) -> tuple[str, list[Any]]:
    """Spawn ranks 1..world-1; returns the rendezvous URL (rank 0 joins it) and the processes."""
    import os

    import torch.multiprocessing as mp

    rendezvous = Path(out) / f".dist-{os.getpid()}"
    rendezvous.unlink(missing_ok=True)
    init = f"file://{rendezvous.resolve()}"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=follower_main, args=(r, world, init, config, threads), daemon=True)
             for r in range(1, world)]
    for p in procs:
        p.start()
    return init, procs


__all__ = ["Leader", "follow", "follower_main", "start_followers"]
