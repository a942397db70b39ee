"""The learner's check of an engine's behaviour log-probabilities against its own recompute.

    check = logprob_mismatch(learner.module, on_policy_samples, pad_id, device, micro_batch_tokens=16384)
    check.to_json()   # {"tokens": 812, "mean_abs": 2.1e-06, "p50": ..., "p90": ..., "p99": ..., "max": ...}

Only samples drawn on the weights the learner holds now are compared (an older version's logprobs differ on
purpose). The recompute is the learner's own: one forward of ``prompt + completion`` in float32 (no grad),
the same :func:`~envfarm.trainer.loss.token_logprobs` the PPO ratio uses, so ``|recompute - behaviour|`` is
exactly how far the first PPO ratio of an on-policy token is from 1 in log space. A float32 vLLM on CPU
agrees to ~1e-5; a bf16 engine against a float32 learner, ~1e-2.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from .loss import token_logprobs
from .samples import TokenSample, micro_batches


@dataclass(frozen=True)
class LogprobMismatch:
    """Distribution of ``|learner recompute - behaviour logprob|`` over completion tokens."""

    tokens: int
    mean_abs: float
    p50: float
    p90: float
    p99: float
    max: float
    mean_signed: float
    """Mean of ``recompute - behaviour``: a bias (e.g. bf16 rounding one way) rather than noise."""

    def to_json(self) -> dict[str, Any]:
        return {k: (v if isinstance(v, int) else float(f"{v:.3g}")) for k, v in asdict(self).items()}


def logprob_mismatch(module: torch.nn.Module, samples: Sequence[TokenSample], pad_id: int,
                     device: torch.device | str, micro_batch_tokens: int = 16384) -> LogprobMismatch | None:
    """Compare the behaviour logprobs of ``samples`` with ``module``'s recompute; None without tokens."""
    with_lp = [s for s in samples if s.logprobs is not None and s.targets > 0]
    if not with_lp:
        return None
    diffs: list[torch.Tensor] = []
    training = module.training
    module.eval()
    try:
        with torch.no_grad():
            for batch in micro_batches(with_lp, pad_id, micro_batch_tokens, device):
                new = token_logprobs(module(batch.input_ids), batch.targets)
                diffs.append((new - batch.old_logprobs)[batch.mask > 0].float().cpu())
    finally:
        module.train(training)
    d = torch.cat(diffs)
    if d.numel() == 0:
        return None
    a = d.abs()
    q = torch.quantile(a, torch.tensor([0.5, 0.9, 0.99])).tolist()
    return LogprobMismatch(int(d.numel()), float(a.mean()), q[0], q[1], q[2], float(a.max()), float(d.mean()))


__all__ = ["LogprobMismatch", "logprob_mismatch"]
