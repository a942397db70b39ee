"""Hugging Face causal LMs from a local folder (``pip install envfarm[hf]``), behind the same :class:`Policy`.

    policy = load_policy(path="models/qwen-0.5b")     # config.json + weights + tokenizer files; no hub access
    generate(policy, [policy.encode_prompt(messages, tools)])

The model is wrapped (:class:`HFCausalLM`) so ``policy.module(input_ids)`` returns logits like the built-in
transformer and the batched sampler drives its KV cache with left padding (2-D attention mask +
``position_ids``). The tokenizer's own chat template renders prompts when it has one
(:class:`~envfarm.trainer.chat.HFTemplate`); its ``eos_token`` ends completions. Loading passes
``local_files_only=True``: nothing is fetched from a hub.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from envfarm.errors import ConfigError

from .base import Policy, PolicySpec
from .chat import HFTemplate


def _transformers() -> Any:
    try:
        import transformers
    except ImportError as e:
        raise ConfigError("loading a Hugging Face model needs transformers: run `pip install envfarm[hf]` "
                          "(or `pip install 'transformers>=4.40'`)") from e
    return transformers


class HFTokenizer:
    """A transformers tokenizer as a :class:`~envfarm.trainer.base.Tokenizer` (specials in text parsed)."""

    def __init__(self, hf: Any, vocab_size: int) -> None:
        self.hf = hf
        self.vocab_size = vocab_size
        if hf.eos_token_id is None:
            raise ConfigError("the Hugging Face tokenizer has no eos_token; set one in tokenizer_config.json")
        self.eos_id = int(hf.eos_token_id)
        self.pad_id = int(hf.pad_token_id if hf.pad_token_id is not None else hf.eos_token_id)

    def encode(self, text: str) -> list[int]:
        return list(self.hf.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.hf.decode(list(ids), skip_special_tokens=False))

    def token_bytes(self, token_id: int) -> bytes:
        return self.decode([token_id]).encode("utf-8")


class HFCache:
    """The model's own cache object plus how many slots it holds."""

    def __init__(self) -> None:
        self.value: Any = None
        self.length = 0


class HFCausalLM(nn.Module):
    """Adapts ``AutoModelForCausalLM`` to the module protocol of ``trainer/base.py``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model: Any = model  # a transformers PreTrainedModel (save_pretrained, config, ...)
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"  # transformers 5 vs 4
        self._keep_arg = "logits_to_keep" if "logits_to_keep" in params else (
            "num_logits_to_keep" if "num_logits_to_keep" in params else None)

    @property
    def config(self) -> Any:
        return self.model.config

    def new_cache(self, batch: int, capacity: int, device: torch.device | None = None,
                  dtype: torch.dtype | None = None) -> HFCache:
        return HFCache()

    def forward(self, input_ids: Tensor, positions: Tensor | None = None, key_mask: Tensor | None = None,
                cache: HFCache | None = None, last_only: bool = False) -> Tensor:
        kwargs: dict[str, Any] = {"input_ids": input_ids, "use_cache": cache is not None}
        if key_mask is not None:
            kwargs["attention_mask"] = key_mask.long()
        if positions is not None:
            kwargs["position_ids"] = positions
        if cache is not None and cache.value is not None:
            kwargs[self._cache_arg] = cache.value
        if last_only and self._keep_arg:
            kwargs[self._keep_arg] = 1
        out = self.model(**kwargs)
        if cache is not None:
            cache.value = out.get("cache", None) or out.get("past_key_values", None)
            cache.length += input_ids.shape[1]
        logits = out.logits
        return logits[:, -1:] if last_only else logits


def _max_context(config: Any, hf_tok: Any) -> int:
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    limit = getattr(hf_tok, "model_max_length", None)
    return int(limit) if isinstance(limit, int) and 0 < limit < 1 << 20 else 2048


def load_hf(folder: str | Path, device: torch.device, dtype: torch.dtype = torch.float32) -> Policy:
    """The causal LM and tokenizer saved in ``folder`` (``save_pretrained``), on ``device``."""
    tf = _transformers()
    path = Path(folder)
    try:
        hf_tok = tf.AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        model = tf.AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True, dtype=dtype)
    except (OSError, ValueError, KeyError) as e:
        raise ConfigError(f"cannot load a Hugging Face causal LM from {str(path)!r} ({type(e).__name__}: "
                          f"{e}); it needs config.json, the weights and the tokenizer files "
                          "(save_pretrained)") from e
    module = HFCausalLM(model).to(device).eval()
    vocab = int(getattr(model.config, "vocab_size", None) or len(hf_tok))
    tok = HFTokenizer(hf_tok, vocab)
    spec = PolicySpec(kind="hf", path=str(path),
                      config={"model_type": getattr(model.config, "model_type", "")})
    return Policy(module, tok, HFTemplate(hf_tok), spec, device, _max_context(model.config, hf_tok),
                  name=path.resolve().name)


def save_hf(policy: Policy, folder: Path) -> None:
    """``save_pretrained`` of the model and its tokenizer into ``folder``."""
    module = policy.module
    if not isinstance(module, HFCausalLM) or not isinstance(policy.tokenizer, HFTokenizer):
        raise ConfigError("save_hf needs a policy loaded from a Hugging Face folder")
    module.model.save_pretrained(str(folder))
    policy.tokenizer.hf.save_pretrained(str(folder))


__all__ = ["HFCausalLM", "HFTokenizer", "load_hf", "save_hf"]
