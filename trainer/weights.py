"""Weights on the wire: a safetensors file of the full state dict, versioned.

    blob = encode_state(policy.module)                         # bytes (tied/aliased tensors stored once)
    load_into(policy, decode_state(blob), version=3)           # in place, under torch.no_grad
    res = await publish("http://127.0.0.1:8000", policy, 3)    # POST /weights -> PublishResult

``POST /weights`` carries the bytes with content type :data:`~envfarm.trainer.base.WEIGHTS_CONTENT_TYPE` and
the version in the ``X-Weight-Version`` header; the server swaps between batches and answers
``{"version": ..., "bytes": ..., "seconds": ...}``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import nn

from envfarm.errors import TrainerError, WeightsError

from .base import VERSION_HEADER, WEIGHTS_CONTENT_TYPE, Policy, WeightVersion

ALIASES_KEY = "envfarm.aliases"


@dataclass(frozen=True)
class PublishResult:
    """What one publication cost; ``version`` as the server reported it."""

    version: Any
    bytes: int
    seconds: float


def encode_state(module_or_state: nn.Module | Mapping[str, torch.Tensor]) -> bytes:
    """safetensors bytes of a state dict (on CPU, contiguous); tensors sharing storage are stored once and
    named in the metadata, so tied embeddings round-trip."""
    state = module_or_state.state_dict() if isinstance(module_or_state, nn.Module) else module_or_state
    tensors: dict[str, torch.Tensor] = {}
    seen: dict[tuple[int, int, tuple[int, ...]], str] = {}
    aliases: dict[str, str] = {}
    for name, t in state.items():
        key = (int(t.untyped_storage().data_ptr()), int(t.storage_offset()), tuple(int(d) for d in t.shape))
        if key in seen and t.numel() > 0:
            aliases[name] = seen[key]
            continue
        seen[key] = name
        tensors[name] = t.detach().to("cpu").contiguous()
    return st_save(tensors, metadata={ALIASES_KEY: json.dumps(aliases)})


def decode_state(blob: bytes) -> dict[str, torch.Tensor]:
    """The state dict in ``blob`` (aliases filled back in); a WeightsError when it is no safetensors file."""
    try:
        state = st_load(bytes(blob))
        meta = _metadata(blob)
    except (SafetensorError, ValueError, json.JSONDecodeError) as e:
        raise WeightsError(f"weights are not a safetensors file ({e}); send encode_state(module) bytes") \
            from e
    for alias, source in json.loads(meta.get(ALIASES_KEY, "{}")).items():
        if source in state:
            state[alias] = state[source]
    return state


def _metadata(blob: bytes) -> dict[str, str]:
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(bytes(blob[8:8 + n]))
    return dict(header.get("__metadata__") or {})


def load_into(policy: Policy, state: Mapping[str, torch.Tensor], version: WeightVersion) -> None:
    """Copy ``state`` into ``policy.module`` in place and set ``policy.version``; a WeightsError naming the
    missing/unexpected/misshaped keys when it does not fit."""
    module = policy.module
    own = module.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = [k for k in own if k in state and tuple(own[k].shape) != tuple(state[k].shape)]
    if missing or unexpected or shapes:
        raise WeightsError(f"weights do not fit model {policy.name!r}: missing {missing[:5]}, unexpected "
                           f"{unexpected[:5]}, wrong shape {shapes[:5]}; publish the same architecture")
    with torch.no_grad():
        for name, t in own.items():
            t.copy_(state[name].to(device=t.device, dtype=t.dtype))
    policy.version = version


def weights_url(url: str) -> str:
    """``http://host:port``, ``.../v1`` or ``.../weights`` -> ``http://host:port/weights``."""
    base = url.rstrip("/")
    for suffix in ("/weights", "/v1"):
        base = base.removesuffix(suffix)
    return base + "/weights"


async def publish(url: str, policy_or_state: Policy | nn.Module | Mapping[str, torch.Tensor] | bytes,
                  version: WeightVersion, session: aiohttp.ClientSession | None = None,
                  timeout_s: float = 300.0) -> PublishResult:
    """POST the weights to a policy server; returns once it serves ``version``."""
    import asyncio

    t0 = time.perf_counter()
    src = policy_or_state
    if isinstance(src, bytes):
        blob = src
    else:
        target: nn.Module | Mapping[str, torch.Tensor] = src.module if isinstance(src, Policy) else src
        blob = await asyncio.to_thread(encode_state, target)
    headers = {"Content-Type": WEIGHTS_CONTENT_TYPE, VERSION_HEADER: str(version)}
    own = session is None
    sess = session or aiohttp.ClientSession()
    try:
        async with sess.post(weights_url(url), data=blob, headers=headers,
                             timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            text = await resp.text()
            if resp.status != 200:
                raise WeightsError(f"policy server {weights_url(url)} refused weights v{version}: "
                                   f"HTTP {resp.status}: {text[-300:]}")
            body = json.loads(text)
    except (aiohttp.ClientError, TimeoutError) as e:
        raise TrainerError(f"cannot publish weights v{version} to {weights_url(url)} ({type(e).__name__}: "
                           f"{e}); is `envfarm policy serve` running there?") from e
    finally:
        if own:
            await sess.close()
    return PublishResult(body.get("version", version), len(blob), time.perf_counter() - t0)


__all__ = ["PublishResult", "decode_state", "encode_state", "load_into", "publish", "weights_url"]
