"""Losses: PPO-clipped policy gradient with GRPO advantages (+ optional KL to a reference), and SFT.

Every loss here is a *sum over completion tokens* divided by ``denom``, the number of completion tokens in
the whole update (all micro-batches, all ranks): the update's loss is the token-level mean over the batch
(DAPO's aggregation; a long completion weighs as much per token as a short one). Or, for RL with
``loss_agg="sequence"``, each token is weighed 1/n by :func:`sequence_weights` (n: its sequence's completion
tokens) and ``denom`` is the number of sequences: every episode weighs the same. In multi-turn episodes the
failures are the long ones (retries after errors), so token-level aggregation pushes shared tokens such as
the tool-call syntax down more than the successes push them up; on ToolCalc that broke the call format
within a few updates. Summing micro-batch losses
then gives the right gradient for gradient accumulation, and summing gradients over ranks (all-reduce SUM)
gives the single-process gradient of the concatenated batch.

PPO, per completion token t with behaviour log-probability ``old`` (from the server that sampled it, at
temperature 1) and the current ``new``:

    ratio = exp(new - old);   pg = max(-A * ratio, -A * clip(ratio, 1 - eps_low, 1 + eps_high))

so for A > 0 the ratio is clipped above (at 1 + eps_high) and for A < 0 below (at 1 - eps_low). At ratio 1
the gradient is the plain policy gradient ``-A * grad(new)``. KL to a frozen reference uses the k3 estimator
``exp(ref - new) - (ref - new) - 1`` (>= 0, unbiased, zero when equal).

All statistics are returned as tensors: nothing here syncs with the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class LossParts:
    """One micro-batch's loss and its summed statistics (tensors, divided by nothing yet except ``loss``)."""

    loss: torch.Tensor
    """Scalar to backpropagate (already divided by ``denom``)."""
    pg_sum: torch.Tensor
    kl_sum: torch.Tensor
    clipped: torch.Tensor
    """Number of completion tokens whose ratio was clipped."""
    ratio_sum: torch.Tensor


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p(target) per position, [B, T] float32 (computed in float32 even under autocast)."""
    logp = F.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def ppo_loss(new: torch.Tensor, old: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
             denom: float, eps_low: float = 0.2, eps_high: float = 0.2,
             ref: torch.Tensor | None = None, kl_coef: float = 0.0,
             weights: torch.Tensor | None = None) -> LossParts:
    """PPO-clip on [B, T] token log-probabilities; ``advantages`` is [B] (one per sequence). ``weights``
    [B, T] (default ``mask``) weighs each token in the loss and KL sums: ``sequence_weights`` gives every
    sequence the same total weight."""
    w = mask if weights is None else weights
    adv = advantages.unsqueeze(-1)
    log_ratio = (new - old) * mask
    ratio = torch.exp(log_ratio)
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    pg = torch.maximum(unclipped, clipped)
    clip_hits = ((clipped > unclipped).float() * mask).sum()
    pg_sum = (pg * w).sum()
    total = pg_sum
    kl_sum = torch.zeros((), device=new.device)
    if ref is not None:
        kl = k3_kl(new, ref) * w
        kl_sum = kl.sum()
        total = total + kl_coef * kl_sum
    ratio_sum = (ratio * mask).sum().detach()
    return LossParts(total / denom, pg_sum.detach(), kl_sum.detach(), clip_hits, ratio_sum)


def sequence_weights(mask: torch.Tensor) -> torch.Tensor:
    """[B, T] weights 1/n on the n completion tokens of each row (0 elsewhere): each sequence's tokens sum
    to 1, so with ``denom`` = the number of sequences the loss is the mean over sequences of their token
    means (GRPO's original aggregation)."""
    return mask / mask.sum(dim=1, keepdim=True).clamp(min=1.0)


def k3_kl(new: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(new || ref) from samples of ``new``: exp(d) - d - 1 with d = ref - new."""
    d = ref - new
    return torch.exp(d) - d - 1.0


def sft_loss(new: torch.Tensor, mask: torch.Tensor, denom: float) -> LossParts:
    """Token cross-entropy on the completion tokens (``new`` = log p(target))."""
    nll = -(new * mask).sum()
    zero = torch.zeros((), device=new.device)
    return LossParts(nll / denom, nll.detach(), zero, zero, zero)


__all__ = ["LossParts", "k3_kl", "ppo_loss", "sequence_weights", "sft_loss", "token_logprobs"]
