"""The trainer's contract, read first: a :class:`Policy` (model + tokenizer + chat template), how it samples,
and what the learner and the policy server exchange.

    Policy ─┬─ module       torch.nn.Module: forward(input_ids [B, T] long) -> logits [B, T, vocab] (float)
            ├─ tokenizer    Tokenizer: text <-> token ids (byte-level for the built-in model, HF for others)
            ├─ template     ChatTemplate: OpenAI messages + tools -> prompt text; completion text <-> message
            └─ spec         PolicySpec: what to rebuild it from (preset / checkpoint / HF folder), JSON-ready

    server (`policy serve`) --- chat completion with token ids + logprobs --->  farm (Trajectory.turns)
    farm                    --- NDJSON trajectories (episode_id dedup) ------->  learner (envfarm train)
    learner                 --- POST /weights (safetensors bytes, version) --->  server (hot swap)

One sample the learner trains on is one assistant turn: ``prompt_token_ids`` (the whole conversation so far,
rendered by the template) followed by ``token_ids`` (the completion, ending in the template's end-of-turn
token). Log-probabilities are of the completion tokens under the weights that sampled them (the behaviour
policy), at temperature 1 before top-p truncation, so PPO's ratio is exact; the server states its version.

Logprob convention, exactly: ``logprobs[i] = log_softmax(logits.float())[token_ids[i]]`` where ``logits`` are
the raw model outputs for ``prompt_token_ids + token_ids[:i]`` -- no division by the temperature, no top-p
mask -- whatever ``temperature``/``top_p`` the request sampled with (vLLM's default ``raw_logprobs``). The
learner recomputes them with one full forward of ``prompt + completion`` at temperature 1 (they agree within
~1e-5 in float32; ~1e-2 under bf16 autocast on GPU). At temperature 1 and top_p 1 (the farm's default) this is
exactly the sampling distribution; at other settings it is the model's own distribution, not the sampler's.

Module protocol (what ``generate.py`` and the server call; the learner needs only ``module(input_ids)``)::

    module(input_ids [B, T], positions=None, key_mask=None, cache=None, last_only=False) -> logits
    module.new_cache(batch, capacity) -> cache     # filled in place by forward calls

Implementations: ``model.py`` (built-in decoder-only transformer + presets), ``tokenizer.py`` (bytes),
``chat.py`` (template + tool-call parsing), ``hf.py`` (transformers, optional), ``policy.py`` (load/save),
``generate.py`` (batched sampling) + ``prefix.py`` (prefix cache), ``server.py`` (OpenAI-compatible aiohttp
app) + ``openai_api.py`` (wire format) + ``streaming.py`` (SSE), ``weights.py`` (safetensors
encode/publish/load).
The learner: ``ingest.py`` (NDJSON endpoint, dedup, staleness), ``batching.py``, ``loss.py`` (GRPO/PPO, SFT),
``learner.py`` (optimizer step, accumulation, DDP), ``checkpoint.py``, ``metrics.py``, ``loop.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch
    from torch import nn

WEIGHTS_CONTENT_TYPE = "application/x-safetensors"
"""``POST /weights`` body: a safetensors file of the full state dict; its version in ``X-Weight-Version``."""
VERSION_HEADER = "X-Weight-Version"
WeightVersion = int | str | None


@runtime_checkable
class Tokenizer(Protocol):
    """Text <-> ids. ``eos_id`` ends a completion (the template's end of turn); ``pad_id`` pads batches."""

    vocab_size: int
    eos_id: int
    pad_id: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


@dataclass(frozen=True)
class ToolCall:
    """One parsed tool call of an assistant completion (OpenAI shape once serialised)."""

    name: str
    arguments: str
    """JSON text of the arguments, as OpenAI sends it."""
    id: str = ""


@dataclass(frozen=True)
class ParsedCompletion:
    """An assistant completion read back: text content and tool calls (either may be empty)."""

    content: str
    tool_calls: tuple[ToolCall, ...] = ()


@runtime_checkable
class ChatTemplate(Protocol):
    """How OpenAI chat messages become text for the model, and how its completions become messages."""

    def render_prompt(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]) -> str:
        """The conversation so far plus the opening of the assistant's turn: what the model continues."""
        ...

    def render_completion(self, message: Mapping[str, Any]) -> str:
        """An assistant message (content and/or tool_calls) as the completion text the model should produce,
        without the end-of-turn token (the tokenizer's ``eos_id`` is appended after encoding)."""
        ...

    def parse_completion(self, text: str) -> ParsedCompletion:
        """A completion (without end-of-turn) read back; text that is no well-formed tool call is content."""
        ...


@dataclass(frozen=True)
class PolicySpec:
    """What a policy is built from; stored next to every checkpoint as JSON."""

    kind: str
    """``builtin`` (envfarm's transformer) or ``hf`` (a transformers causal LM from a local folder)."""
    preset: str | None = None
    """Built-in size preset, e.g. ``tiny-cpu``."""
    path: str | None = None
    """HF folder or checkpoint folder."""
    config: Mapping[str, Any] = field(default_factory=dict)
    """Model hyper-parameters (the preset's, with overrides)."""


@dataclass(frozen=True)
class Sample:
    """One sampled completion: ids (ending with eos unless cut by max_tokens), their behaviour logprobs."""

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: str
    """``stop`` (eos) or ``length`` (max_tokens)."""
    top_logprobs: tuple[tuple[tuple[int, float], ...], ...] = ()
    """Per token, the ``(token_id, logprob)`` of the most likely alternatives (same convention), when asked
    (OpenAI's ``top_logprobs``); empty otherwise."""


@dataclass
class Policy:
    """Model + tokenizer + template on one device. Mutable: the learner trains ``module`` in place and the
    server swaps its weights (``version`` names the weights currently loaded)."""

    module: nn.Module
    tokenizer: Tokenizer
    template: ChatTemplate
    spec: PolicySpec
    device: torch.device
    max_context: int
    version: WeightVersion = 0
    name: str = "envfarm"
    """The model id the server lists at ``/v1/models``."""

    def encode_prompt(self, messages: Sequence[Mapping[str, Any]],
                      tools: Sequence[Mapping[str, Any]] = ()) -> list[int]:
        """Token ids of the conversation so far plus the opening of the assistant's turn."""
        return self.tokenizer.encode(self.template.render_prompt(messages, tools))

    def encode_completion(self, message: Mapping[str, Any]) -> list[int]:
        """Token ids of an assistant message as the model should produce it, ending with ``eos_id``."""
        return [*self.tokenizer.encode(self.template.render_completion(message)), self.tokenizer.eos_id]

    def decode_completion(self, token_ids: Sequence[int]) -> str:
        """Text of sampled completion ids (a trailing eos dropped)."""
        ids = list(token_ids)
        if ids and ids[-1] == self.tokenizer.eos_id:
            ids.pop()
        return self.tokenizer.decode(ids)

    def parse_completion(self, token_ids: Sequence[int]) -> ParsedCompletion:
        return self.template.parse_completion(self.decode_completion(token_ids))

    def num_params(self) -> int:
        return sum(p.numel() for p in self.module.parameters())


__all__ = [
    "VERSION_HEADER",
    "WEIGHTS_CONTENT_TYPE",
    "ChatTemplate",
    "ParsedCompletion",
    "Policy",
    "PolicySpec",
    "Sample",
    "Tokenizer",
    "ToolCall",
    "WeightVersion",
]
