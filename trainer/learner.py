"""The optimizer step: micro-batches, gradient accumulation, (data-parallel) gradient sum, clipping, AdamW.

    learner = Learner(policy.module, LearnerConfig(lr=3e-4), pad_id=tok.pad_id, device=dev)
    stats = learner.update(samples, "rl")    # or "sft"; blocking: from async code, in a worker thread

One call is one optimizer step over all ``samples``: they are cut into micro-batches of at most
``micro_batch_tokens`` padded tokens, each micro-batch's loss (divided by the completion tokens of the whole
update, see loss.py) is backpropagated and the gradients accumulate; with a :class:`DistContext` of several
ranks every rank takes its share of the samples and the gradients are summed across ranks before the step.
On CUDA the forward pass runs under bf16 autocast. Statistics stay on the device until the end of the update,
where one transfer reads them all (the only host sync of an update).
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from envfarm.errors import ConfigError, TrainerError

from .distributed import DistContext
from .loss import LossParts, ppo_loss, sequence_weights, sft_loss, token_logprobs
from .samples import Batch, TokenSample, micro_batches
from .train_config import TrainConfig

Kind = Literal["rl", "sft"]


@dataclass(frozen=True)
class LearnerConfig:
    """Optimisation hyper-parameters."""

    lr: float = 3e-4
    """AdamW learning rate (after warm-up)."""
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    """Max global gradient norm (0: no clipping)."""
    warmup_steps: int = 0
    """Linear learning-rate warm-up over this many optimizer steps."""
    clip_eps_low: float = 0.2
    """PPO: the ratio is clipped below at 1 - this (negative advantages)."""
    clip_eps_high: float = 0.2
    """PPO: the ratio is clipped above at 1 + this (positive advantages)."""
    kl_coef: float = 0.0
    """Weight of the k3 KL to the frozen reference (0: no reference is kept)."""
    loss_agg: Literal["token", "sequence"] = "token"
    """RL loss aggregation: the mean over all completion tokens of the update, or the mean over sequences
    of each sequence's token mean (every episode weighs the same; see loss.py). SFT is always per token."""
    micro_batch_tokens: int = 8192
    """Padded tokens (rows x longest row) per micro-batch: the gradient-accumulation unit."""
    bf16: bool = True
    """bf16 autocast for the forward pass on CUDA (ignored on CPU)."""

    def __post_init__(self) -> None:
        if self.loss_agg not in ("token", "sequence"):
            raise ConfigError(f"loss_agg must be 'token' or 'sequence', got {self.loss_agg!r}")
        if self.lr <= 0 or self.micro_batch_tokens < 1 or self.kl_coef < 0 or self.grad_clip < 0:
            raise ConfigError(f"LearnerConfig needs lr > 0, micro_batch_tokens >= 1, kl_coef >= 0, grad_clip "
                              f">= 0; got {self.lr}, {self.micro_batch_tokens}, {self.kl_coef}, "
                              f"{self.grad_clip}")


@dataclass(frozen=True)
class UpdateStats:
    """What one optimizer step did (host numbers, read once at its end)."""

    kind: Kind
    step: int
    """Optimizer steps done, this one included."""
    loss: float
    """pg (+ kl_coef * kl) for RL, token NLL for SFT: per completion token."""
    kl: float | None
    clip_frac: float | None
    ratio_mean: float | None
    grad_norm: float
    lr: float
    samples: int
    tokens: int
    """Completion tokens trained on (all ranks)."""
    padded_tokens: int
    """Tokens through the model on this rank, padding included."""
    seconds: float


class Learner:
    """Owns the optimizer of ``module`` (see the module docstring)."""

    def __init__(self, module: torch.nn.Module, config: LearnerConfig, pad_id: int,
                 device: torch.device | str = "cpu", dist: DistContext | None = None) -> None:
        self.module = module
        self.config = config
        self.pad_id = pad_id
        self.device = torch.device(device)
        self.dist = dist or DistContext.single(self.device)
        self.step = 0
        params = [p for p in module.parameters() if p.requires_grad]
        fused = self.device.type == "cuda"
        self.optimizer = torch.optim.AdamW(params, lr=config.lr, betas=config.betas,
                                           weight_decay=config.weight_decay, fused=fused)
        self.reference: torch.nn.Module | None = None
        self.reset_reference()

    def reset_reference(self, state: Mapping[str, torch.Tensor] | None = None) -> None:
        """Freeze a copy of the current weights (or of ``state``) as the KL reference; nothing without a KL
        term (``kl_coef`` 0)."""
        if self.config.kl_coef <= 0:
            return
        ref = copy.deepcopy(self.module).eval()
        if state is not None:
            ref.load_state_dict(state)
        for p in ref.parameters():
            p.requires_grad_(False)
        self.reference = ref

    def lr_at(self, step: int) -> float:
        warm = self.config.warmup_steps
        return self.config.lr * (min(1.0, (step + 1) / warm) if warm > 0 else 1.0)

    def reset_optimizer(self) -> None:
        """Forget the AdamW moments (e.g. between SFT and RL); the step count stays."""
        self.optimizer.state.clear()

    def update(self, samples: Sequence[TokenSample], kind: Kind, lr: float | None = None) -> UpdateStats:
        """One optimizer step on ``samples`` (every rank passes the same list); ``lr`` overrides the
        configured rate (and its warm-up) for this step. Blocking."""
        t0 = time.perf_counter()
        if not samples:
            raise TrainerError(f"a {kind} update got no samples")
        tokens = sum(s.targets for s in samples)
        if tokens == 0:
            raise TrainerError(f"a {kind} update got {len(samples)} samples without completion tokens")
        per_sequence = kind == "rl" and self.config.loss_agg == "sequence"
        denom = len(samples) if per_sequence else tokens
        lr = self.lr_at(self.step) if lr is None else lr
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.module.train()
        self.optimizer.zero_grad(set_to_none=True)
        batches = micro_batches(self.dist.shard(samples), self.pad_id, self.config.micro_batch_tokens,
                                self.device)
        sums = torch.zeros(4, device=self.device)  # loss*denom, kl, clipped, ratio
        padded = 0
        for batch in batches:
            parts = self._micro(batch, kind, denom)
            parts.loss.backward()
            sums += torch.stack([parts.pg_sum + self.config.kl_coef * parts.kl_sum, parts.kl_sum,
                                 parts.clipped, parts.ratio_sum]).detach()
            padded += batch.input_ids.numel()
        self._ensure_grads()
        self.dist.sum_grads(self.module)
        self.dist.sum_tensor(sums)
        norm = self._clip()
        values = torch.cat([sums, norm.reshape(1).to(sums)]).tolist()  # the update's one host sync
        if not all(math.isfinite(v) for v in values):
            self.optimizer.zero_grad(set_to_none=True)
            raise TrainerError(f"{kind} update {self.step + 1} is not finite (loss sum {values[0]}, grad "
                               f"norm {values[4]}); lower --lr. The weights were left as they were")
        self.optimizer.step()
        self.step += 1
        loss, kl, clipped, ratio, gnorm = values
        rl = kind == "rl"
        return UpdateStats(kind, self.step, loss / denom, kl / denom if rl and self.reference else None,
                           clipped / tokens if rl else None, ratio / tokens if rl else None, gnorm, lr,
                           len(samples), tokens, padded, time.perf_counter() - t0)

    def _micro(self, batch: Batch, kind: Kind, denom: int) -> LossParts:
        use_bf16 = self.config.bf16 and self.device.type == "cuda"
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=use_bf16):
            new = token_logprobs(self.module(batch.input_ids), batch.targets)
            if kind == "sft":
                return sft_loss(new, batch.mask, denom)
            ref = None
            if self.reference is not None:
                with torch.no_grad():
                    ref = token_logprobs(self.reference(batch.input_ids), batch.targets)
        c = self.config
        weights = sequence_weights(batch.mask) if c.loss_agg == "sequence" else None
        return ppo_loss(new, batch.old_logprobs, batch.advantages, batch.mask, denom, c.clip_eps_low,
                        c.clip_eps_high, ref, c.kl_coef, weights)

    def _ensure_grads(self) -> None:
        """Zero gradients where a rank had nothing to backpropagate: every rank all-reduces the same set."""
        if not self.dist.active:
            return
        for p in self.module.parameters():
            if p.requires_grad and p.grad is None:
                p.grad = torch.zeros_like(p)

    def _clip(self) -> torch.Tensor:
        params = [p for p in self.module.parameters() if p.grad is not None]
        if self.config.grad_clip > 0 and params:
            return torch.nn.utils.clip_grad_norm_(params, self.config.grad_clip)
        if not params:
            return torch.zeros((), device=self.device)
        return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params]))


def learner_config(c: TrainConfig) -> LearnerConfig:
    """The learner's optimisation settings of a training run (every rank builds the same)."""
    return LearnerConfig(lr=c.lr, clip_eps_low=c.clip_eps, clip_eps_high=c.clip_eps, kl_coef=c.kl_coef,
                         micro_batch_tokens=c.micro_batch_tokens, warmup_steps=0, loss_agg=c.loss_agg)


__all__ = ["Learner", "LearnerConfig", "UpdateStats", "learner_config"]
