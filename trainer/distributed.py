"""Data parallelism with ``torch.distributed``: gloo on CPU, nccl on GPU.

    ctx = DistContext.init(rank, world_size, init_method="tcp://127.0.0.1:29500", device=dev)
    my_samples = ctx.shard(samples)          # rank r takes every world_size-th sample
    ...backward...
    ctx.sum_grads(module)                    # all-reduce SUM: losses are already divided by the global count
    ctx.close()

Gradients are summed, not averaged: each rank's loss is divided by the completion tokens of the whole update
across ranks (``ctx.sum_int``), so the summed gradient equals the single-process gradient of the
concatenated batch. Parameters start equal (``ctx.broadcast_params`` from rank 0) and stay equal because
every rank applies the same summed gradient with the same optimizer.

Single process (the default): ``DistContext.single()``; every call is then a no-op.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.distributed as dist

from envfarm.errors import ConfigError

T = TypeVar("T")
CPU = torch.device("cpu")


@dataclass(frozen=True)
class DistContext:
    """Where this process sits in the data-parallel group."""

    rank: int = 0
    world_size: int = 1
    device: torch.device = CPU

    @classmethod
    def single(cls, device: torch.device | str = "cpu") -> DistContext:
        return cls(0, 1, torch.device(device))

    @classmethod
    def init(cls, rank: int, world_size: int, init_method: str, device: torch.device | str = "cpu",
             timeout_s: float = 300.0) -> DistContext:
        """Join the process group (gloo for CPU, nccl for CUDA)."""
        import datetime

        dev = torch.device(device)
        if world_size < 1 or not 0 <= rank < world_size:
            raise ConfigError(f"rank {rank} is not in a world of {world_size} processes")
        if world_size > 1 and not dist.is_initialized():
            backend = "nccl" if dev.type == "cuda" else "gloo"
            dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size,
                                    timeout=datetime.timedelta(seconds=timeout_s))
        return cls(rank, world_size, dev)

    @property
    def active(self) -> bool:
        return self.world_size > 1

    def shard(self, items: Sequence[T]) -> list[T]:
        """This rank's share: items rank, rank + world, ... (every rank gets a near-equal share)."""
        return list(items[self.rank :: self.world_size])

    def sum_int(self, value: int) -> int:
        """``value`` summed over ranks (one small collective per update, not per micro-batch)."""
        if not self.active:
            return value
        t = torch.tensor([value], dtype=torch.long, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return int(t.item())

    def sum_grads(self, module: torch.nn.Module) -> None:
        """All-reduce SUM of every gradient, flattened into one buffer (one collective)."""
        if not self.active:
            return
        grads = [p.grad for p in module.parameters() if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for g in grads:
            n = g.numel()
            g.copy_(flat[offset : offset + n].view_as(g))
            offset += n

    def sum_tensor(self, t: torch.Tensor) -> torch.Tensor:
        if self.active:
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t

    def broadcast_params(self, module: torch.nn.Module) -> None:
        """Rank 0's parameters and buffers to every rank."""
        if not self.active:
            return
        for t in [*module.parameters(), *module.buffers()]:
            dist.broadcast(t.data, src=0)

    def broadcast_object(self, obj: T | None) -> T:
        """Rank 0's ``obj`` (pickled) to every rank; the others pass None."""
        if not self.active:
            assert obj is not None
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]  # type: ignore[return-value]

    def close(self) -> None:
        if self.active and dist.is_initialized():
            dist.destroy_process_group()


__all__ = ["DistContext"]
