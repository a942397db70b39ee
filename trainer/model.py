"""The built-in decoder-only transformer: pre-norm (RMSNorm), RoPE, causal SDPA, GELU MLP, tied embeddings,
and (``token_shift``, tiny-cpu's) the previous token's embedding mixed into each token's.

    model = Transformer(PRESETS["tiny-cpu"])          # ~0.84M parameters, byte-level vocabulary
    logits = model(input_ids)                         # [B, T] long -> [B, T, vocab] float (training path)

    cache = model.new_cache(batch=B, capacity=T + max_new)
    logits = model(prompt_ids, positions=pos, key_mask=valid, cache=cache)   # prefill (left-padded batch)
    logits = model(next_ids[:, None], positions=pos[:, -1:] + 1, key_mask=valid2, cache=cache)  # one step

``key_mask`` [B, S] (bool) marks which of the S keys seen so far (cache + new) are real tokens; each query
attends to real keys at or before its slot, and always to itself (so padding rows stay finite). Without
``key_mask`` and ``cache`` the plain causal fast path is used: right-padded training batches need no mask.
The output projection is the embedding matrix (no separate ``lm_head`` entry in the state dict). The cache
also keeps each row's last token: the token shift's previous token for the next call (the prefix cache sets
it before a prefill that starts after stored slots). A padding slot is no token's previous.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from envfarm.errors import ConfigError


@dataclass(frozen=True)
class ModelConfig:
    """Hyper-parameters of :class:`Transformer`."""

    vocab_size: int = 262
    """Token ids 0 .. vocab_size-1 (the byte tokenizer has 262)."""
    d_model: int = 128
    """Width of the residual stream."""
    n_layers: int = 4
    """Number of transformer blocks."""
    n_heads: int = 4
    """Attention heads; ``d_model`` must divide evenly."""
    d_ff: int = 512
    """Hidden width of the MLP."""
    max_context: int = 4096
    """Longest sequence (prompt + completion) the model handles; RoPE tables are this long. Byte-level
    ToolCalc prompts are ~650 tokens with the env's tool help (~300 without) and a failed turn adds ~290
    (the env's error message) plus the completion: 8 turns of 64-token completions need ~3,500. A longer
    conversation is refused (400), which the farm records as a policy error: keep failures inside the
    context so RL sees them."""
    rope_theta: float = 10000.0
    """RoPE base frequency."""
    norm_eps: float = 1e-5
    """RMSNorm epsilon."""
    init_std: float = 0.02
    """Std of the normal initialisation (output projections scaled by 1/sqrt(2 n_layers))."""
    token_shift: bool = False
    """Add a learned linear map of the previous token's embedding to each token's embedding (RWKV's token
    shift): every layer sees which token came before, so a head can find "the digit after the one just
    copied" in one hop, without first growing a previous-token head. Off by default (configs saved before
    it load unchanged); tiny-cpu has it (see ``PRESETS``)."""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"unknown model config keys {sorted(unknown)}; known: {sorted(known)}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


PRESETS: dict[str, ModelConfig] = {
    "tiny-cpu": ModelConfig(token_shift=True),
    "small": ModelConfig(d_model=512, n_layers=8, n_heads=8, d_ff=2048, max_context=4096),
    "base": ModelConfig(d_model=768, n_layers=12, n_heads=12, d_ff=3072, max_context=4096),
}
"""``tiny-cpu`` (~0.84M, trains on 2 cores), ``small`` (~25M) and ``base`` (~85M) for GPUs.

tiny-cpu has the token shift: SFT on the noisy teacher's demonstrations sits on a loss plateau where it
copies the numbers of the question wrongly, digit by digit, and leaves it at a step that depends on the
seed. Steps until the held-out greedy match reaches 0.36 (``sft_target`` 0.6 of 0.6), the demonstrations
and batches of training seeds 0, 1, 2: without the shift 2,000, none by 3,000 (0.22), none by 3,000
(0.14); with it 2,100, 1,850, 2,500."""


def preset_config(name: str, **overrides: Any) -> ModelConfig:
    """The preset's config with ``overrides``; a ConfigError naming the presets for an unknown name."""
    if name not in PRESETS:
        import difflib

        hint = difflib.get_close_matches(name, list(PRESETS), n=1)
        did = f"; did you mean {hint[0]!r}?" if hint else ""
        raise ConfigError(f"unknown model preset {name!r}: use one of {', '.join(PRESETS)}{did}")
    return replace(PRESETS[name], **overrides)


class KVCache:
    """Preallocated keys/values of every layer: [layers, B, heads, capacity, head_dim]; ``length`` slots
    are filled (the same for every row: rows are aligned by left padding)."""

    def __init__(self, cfg: ModelConfig, batch: int, capacity: int, device: torch.device,
                 dtype: torch.dtype) -> None:
        shape = (cfg.n_layers, batch, cfg.n_heads, capacity, cfg.d_model // cfg.n_heads)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.last = torch.zeros(batch, dtype=torch.long, device=device)
        """Each row's token in slot ``length - 1`` (token shift: the previous token of the next forward)."""
        self.capacity = capacity
        self.length = 0

    def select(self, index: Tensor) -> KVCache:
        """A new cache holding rows ``index`` (copied; a row may repeat)."""
        out = object.__new__(KVCache)
        out.k, out.v = self.k.index_select(1, index), self.v.index_select(1, index)
        out.last = self.last.index_select(0, index)
        out.capacity, out.length = self.capacity, self.length
        return out

    def rows(self, start: int, stop: int, length: int) -> KVCache:
        """A view of rows ``start:stop`` (no copy) whose next write goes to slot ``length``."""
        view = object.__new__(KVCache)
        view.k, view.v = self.k[:, start:stop], self.v[:, start:stop]
        view.last = self.last[start:stop]
        view.capacity, view.length = self.capacity, length
        return view


def _rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.attn_norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.mlp_norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.up = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.down = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, cache: KVCache | None,
                layer: int) -> Tensor:
        B, T, D = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(B, T, 3, self.n_heads, D // self.n_heads).unbind(2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, H, T, hd]
        q, k = _rope(q, cos.to(q.dtype), sin.to(q.dtype)), _rope(k, cos.to(k.dtype), sin.to(k.dtype))
        if cache is not None:
            start = cache.length
            cache.k[layer, :, :, start:start + T] = k
            cache.v[layer, :, :, start:start + T] = v
            k, v = cache.k[layer, :, :, :start + T], cache.v[layer, :, :, :start + T]
            if k.dtype != q.dtype:
                k, v = k.to(q.dtype), v.to(q.dtype)
        causal = mask is None and T > 1  # with a cache only when it was empty (see forward)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, D))
        return x + self.down(F.gelu(self.up(self.mlp_norm(x)), approximate="tanh"))


class Transformer(nn.Module):
    """Decoder-only LM; see the module docstring for the two call paths."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if cfg.d_model % cfg.n_heads or (cfg.d_model // cfg.n_heads) % 2:
            raise ConfigError(f"d_model {cfg.d_model} must split into {cfg.n_heads} heads of even width")
        self.config = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.shift = nn.Linear(cfg.d_model, cfg.d_model, bias=False) if cfg.token_shift else None
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        hd = cfg.d_model // cfg.n_heads
        inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        angles = torch.outer(torch.arange(cfg.max_context, dtype=torch.float32), inv)
        self.register_buffer("rope_cos", angles.cos(), persistent=False)
        self.register_buffer("rope_sin", angles.sin(), persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        std = self.config.init_std
        for name, p in self.named_parameters():
            if p.dim() < 2:
                continue
            scale = 1 / math.sqrt(2 * self.config.n_layers) if name.endswith(("proj.weight", "down.weight")) \
                else 1.0
            nn.init.normal_(p, mean=0.0, std=std * scale)

    @property
    def max_context(self) -> int:
        return self.config.max_context

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def new_cache(self, batch: int, capacity: int, device: torch.device | None = None,
                  dtype: torch.dtype | None = None) -> KVCache:
        ref = self.embed.weight
        return KVCache(self.config, batch, capacity, device or ref.device, dtype or ref.dtype)

    def _embed(self, input_ids: Tensor, key_mask: Tensor | None, cache: KVCache | None) -> Tensor:
        """Token embeddings, plus (``token_shift``) the shift map of the previous real token's embedding."""
        x = self.embed(input_ids)
        if self.shift is None:
            return x
        first, real = _previous(input_ids, key_mask, cache)
        prev = torch.cat([self.embed(first), x[:, :-1]], 1)  # only the first token's previous is new
        return x + self.shift(prev) * real.to(x.dtype)

    def forward(self, input_ids: Tensor, positions: Tensor | None = None, key_mask: Tensor | None = None,
                cache: KVCache | None = None, last_only: bool = False) -> Tensor:
        """Logits [B, T, vocab] (``last_only``: [B, 1, vocab]); ``positions`` default to slots 0.. (after
        the cache's). With a cache, the caller keeps positions below ``max_context``."""
        T = input_ids.shape[1]
        past = cache.length if cache is not None else 0
        if positions is None and past + T > self.config.max_context:
            raise ConfigError(f"sequence of {past + T} tokens exceeds max_context {self.config.max_context}")
        if positions is None:
            positions = torch.arange(past, past + T, device=input_ids.device).unsqueeze(0)
        rope_cos, rope_sin = cast(Tensor, self.rope_cos), cast(Tensor, self.rope_sin)  # buffers
        cos, sin = rope_cos[positions].unsqueeze(1), rope_sin[positions].unsqueeze(1)
        need_mask = key_mask is not None or (past > 0 and T > 1)
        mask = _attn_mask(key_mask, past, T, input_ids.device) if need_mask else None
        x = self._embed(input_ids, key_mask, cache)
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, mask, cache, i)
        if cache is not None:
            cache.length = past + T
            cache.last.copy_(input_ids[:, -1])
        if last_only:
            x = x[:, -1:]
        return F.linear(self.norm(x), self.embed.weight)


def _previous(input_ids: Tensor, key_mask: Tensor | None, cache: KVCache | None) -> tuple[Tensor, Tensor]:
    """(id [B, 1] of the token before the first of ``input_ids``: the cache's last, or a placeholder in slot
    0; whether the token before each is a real token [B or 1, T, 1]: padding slots and slot -1 are not)."""
    B, T = input_ids.shape
    past = cache.length if cache is not None else 0
    first = cache.last[:, None] if cache is not None else input_ids[:, :1]
    slots = torch.arange(past - 1, past + T - 1, device=input_ids.device)
    real = (slots >= 0).unsqueeze(0).expand(B if key_mask is not None else 1, T)
    if key_mask is not None:
        real = real & key_mask[:, slots.clamp(min=0)].bool()
    return first, real.unsqueeze(-1)


def _attn_mask(key_mask: Tensor | None, past: int, T: int, device: torch.device) -> Tensor:
    """[B or 1, 1, T, past+T] bool: real keys at or before each query's slot, plus the query itself."""
    S = past + T
    q_slot = torch.arange(past, S, device=device).unsqueeze(1)
    k_slot = torch.arange(S, device=device).unsqueeze(0)
    allowed = (k_slot <= q_slot).unsqueeze(0)  # [1, T, S]
    if key_mask is not None:
        allowed = allowed & key_mask[:, None, :S].bool()
    allowed = allowed | (k_slot == q_slot).unsqueeze(0)
    return allowed.unsqueeze(1)


__all__ = ["PRESETS", "KVCache", "ModelConfig", "Transformer", "preset_config"]
