"""``--engine vllm``: a vLLM server (vllm_process.py) behind envfarm's front (vllm_front.py), one engine.

    engine = VLLMEngine(Path("models/qwen-tiny"), VLLMConfig(), workdir=Path("out/engine"))
    url = await engine.start("127.0.0.1", 0)           # what the farm's openai:URL and publish() talk to
    await engine.swap(learner.module, version=1)       # in place, between requests; or POST {url}/weights
    await engine.stop()

    engine = VLLMEngine.for_policy(policy, VLLMConfig(), workdir)   # a trained HF policy: saved, then served

It has the built-in :class:`~envfarm.trainer.server.PolicyServer`'s surface (``url``, ``version``,
``start``, ``stop``, ``swap``; see engines.py), so the training loop and ``envfarm policy serve`` drive
either.
Files under ``workdir``: ``vllm.log`` (the server's output; errors name it), ``model/`` (the policy saved for
vLLM when the engine serves an in-memory policy), ``weights/v<N>/`` (the latest published weights).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from envfarm.errors import ConfigError

from .base import Policy, WeightVersion
from .vllm_front import ReloadResult, VLLMFront
from .vllm_process import VLLMConfig, VLLMProcess

log = logging.getLogger(__name__)


class VLLMEngine:
    """See the module docstring."""

    checks_logprobs = True
    """The learner checks this engine's behaviour logprobs against its recompute (logprob_check.py)."""

    def __init__(self, model_dir: Path, config: VLLMConfig, workdir: Path, version: WeightVersion = 0,
                 name: str | None = None, policy: Policy | None = None) -> None:
        self.model_dir = Path(model_dir)
        self.config = config
        self.workdir = Path(workdir)
        self.name = name
        self._policy = policy
        self._initial_version = version
        self.process = VLLMProcess(self.model_dir, config, self.workdir / "vllm.log", name=name)
        self.front: VLLMFront | None = None

    @classmethod
    def for_policy(cls, policy: Policy, config: VLLMConfig, workdir: Path) -> VLLMEngine:
        """An engine serving ``policy`` as it is now (saved to ``workdir/model`` when started)."""
        if policy.spec.kind != "hf":
            raise ConfigError(f"the vLLM engine serves Hugging Face models; {policy.name!r} is a built-in "
                              "envfarm model: use --engine builtin, or --checkpoint HF_DIR")
        return cls(Path(workdir) / "model", config, workdir, version=policy.version, name=policy.name,
                   policy=policy)

    @property
    def url(self) -> str:
        return self.front.url if self.front is not None else ""

    @property
    def version(self) -> WeightVersion:
        return self.front.version if self.front is not None else self._initial_version

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Start vLLM (loopback, a free port), then the front on ``host:port``; returns the front's URL."""
        if self._policy is not None:
            await asyncio.to_thread(_save_for_vllm, self._policy, self.model_dir)
        upstream = await self.process.start()
        self.front = VLLMFront(upstream, self.workdir / "weights", self._initial_version,
                               alive=self.process.check_alive)
        try:
            url = await self.front.start(host, port)
        except BaseException:
            await self.stop()
            raise
        log.info("vLLM engine for %s (weights %r) at %s/v1, engine at %s, started in %.1fs", self.model_dir,
                 self.version, url, upstream, self.process.start_s)
        return url

    async def stop(self) -> None:
        front, self.front = self.front, None
        try:
            if front is not None:
                self._initial_version = front.version
                await front.stop()
        finally:
            await self.process.stop()

    async def swap(self, state: Mapping[str, torch.Tensor] | nn.Module,
                   version: WeightVersion) -> ReloadResult:
        """Load ``state`` (a state dict of the policy module, or the module) as ``version``, in place; the
        in-process twin of ``POST /weights``."""
        if self.front is None:
            raise ConfigError("the vLLM engine is not started")
        if isinstance(state, nn.Module):  # a copy: the learner may go on training the module
            state = await asyncio.to_thread(_copy_state, state)
        return await self.front.reload(state, version)

    async def __aenter__(self) -> VLLMEngine:
        if self.front is None:
            await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def _copy_state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _save_for_vllm(policy: Policy, folder: Path) -> None:
    from .hf import save_hf

    folder.mkdir(parents=True, exist_ok=True)
    save_hf(policy, folder)


__all__ = ["VLLMConfig", "VLLMEngine"]
