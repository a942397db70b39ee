"""Rollout engines: what samples for the farm and takes the learner's weights; one per file, this contract.

    engine = make_engine("vllm", policy, version=0, max_batch=64, max_tokens=96, seed=0, workdir=out / "e")
    url = await engine.start("127.0.0.1", 0)      # farm: openai:{url}/v1; learner: publish(url, module, v)
    await engine.swap(module_or_state, version)   # in process; POST {url}/weights does the same over HTTP
    await engine.stop()

    builtin  server.py       envfarm's own policy server, in this process (any policy; the default)
    vllm     vllm_engine.py  a vLLM server on loopback (Hugging Face models; weights reloaded in place)

Both answer ``/v1/chat/completions`` with token ids and behaviour logprobs and name the weight version on
every reply (``X-Weight-Version``), so the farm's staleness bound and the learner's samples are the same
whichever engine sampled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Literal, Protocol

import torch
from torch import nn

from envfarm.errors import ConfigError

from .base import Policy, WeightVersion

EngineName = Literal["builtin", "vllm"]
ENGINES: tuple[str, ...] = ("builtin", "vllm")


class RolloutEngine(Protocol):
    """The surface the training loop and ``envfarm policy serve`` use."""

    @property
    def url(self) -> str:
        """``http://host:port`` once started (no ``/v1``)."""
        ...

    @property
    def version(self) -> WeightVersion:
        """The weight version every reply is produced by now."""
        ...

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str: ...

    async def stop(self) -> None: ...

    async def swap(self, state: Mapping[str, torch.Tensor] | nn.Module, version: WeightVersion) -> object:
        """Load ``state`` as ``version`` between requests; no reply mixes two versions."""
        ...


def make_engine(name: str, policy: Policy, *, version: WeightVersion, max_batch: int, max_tokens: int,
                seed: int, workdir: Path, threads: int | None = None) -> RolloutEngine:
    """The engine ``name`` serving ``policy``'s weights as they are now, as ``version``; the built-in one
    gets its own copy of the model, so the learner may go on training ``policy``."""
    if name == "builtin":
        from .policy import clone_policy
        from .server import PolicyServer, ServerConfig

        served = clone_policy(policy)
        served.version = version
        return PolicyServer(served, ServerConfig(max_batch=max_batch, max_tokens=max_tokens, seed=seed))
    if name == "vllm":
        from .vllm_engine import VLLMEngine
        from .vllm_process import VLLMConfig

        config = replace(VLLMConfig(), max_num_seqs=max_batch, seed=seed, threads=threads)
        return VLLMEngine.for_policy(replace(policy, version=version), config, workdir)
    raise ConfigError(f"unknown engine {name!r}; choose one of {', '.join(ENGINES)}")


__all__ = ["ENGINES", "EngineName", "RolloutEngine", "make_engine"]
