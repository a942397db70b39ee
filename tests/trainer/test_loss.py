"""Loss math: PPO-clip reduces to the policy gradient at ratio 1, clips on the right side, k3 KL, SFT NLL."""

from __future__ import annotations

import pytest
import torch

from envfarm.trainer.loss import k3_kl, ppo_loss, sequence_weights, sft_loss, token_logprobs

torch.manual_seed(0)


def _case(b: int = 3, t: int = 5) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    new = (torch.randn(b, t) - 2).requires_grad_(True)
    mask = (torch.rand(b, t) > 0.3).float()
    adv = torch.tensor([1.5, -0.5, 2.0])[:b]
    return new, mask, adv


def test_at_ratio_one_the_loss_is_the_policy_gradient() -> None:
    new, mask, adv = _case()
    denom = float(mask.sum())
    parts = ppo_loss(new, new.detach().clone(), adv, mask, denom)
    parts.loss.backward()
    grad = new.grad.clone()
    new.grad = None
    pg = -(adv[:, None] * new * mask).sum() / denom
    pg.backward()
    assert torch.allclose(grad, new.grad, atol=1e-7)
    assert parts.loss.item() == pytest.approx(-(adv[:, None] * mask).sum().item() / denom)
    assert parts.clipped.item() == 0 and parts.ratio_sum.item() == pytest.approx(denom)


@pytest.mark.parametrize(("adv", "log_ratio", "clipped"), [
    (1.0, 0.5, True),     # A > 0: a ratio above 1 + eps is clipped (no push further up)
    (1.0, -0.5, False),   # A > 0: a ratio below 1 - eps still gets its gradient
    (-1.0, -0.5, True),   # A < 0: a ratio below 1 - eps is clipped
    (-1.0, 0.5, False),   # A < 0: a ratio above 1 + eps still gets its gradient
])
def test_clipping_engages_on_the_side_of_the_advantage(adv: float, log_ratio: float, clipped: bool) -> None:
    old = torch.full((1, 1), -1.0)
    new = (old + log_ratio).requires_grad_(True)
    mask = torch.ones(1, 1)
    parts = ppo_loss(new, old, torch.tensor([adv]), mask, denom=1.0, eps_low=0.2, eps_high=0.2)
    parts.loss.backward()
    assert parts.clipped.item() == float(clipped)
    if clipped:
        assert new.grad.abs().item() == 0.0
        assert parts.loss.item() == pytest.approx(-adv * (1.2 if adv > 0 else 0.8))
    else:
        assert new.grad.item() == pytest.approx(-adv * torch.exp(torch.tensor(log_ratio)).item(), rel=1e-5)


def test_k3_kl_is_zero_when_equal_and_positive_otherwise() -> None:
    x = torch.randn(4, 6)
    assert torch.equal(k3_kl(x, x), torch.zeros_like(x))
    assert (k3_kl(x, x + 0.3) > 0).all() and (k3_kl(x, x - 0.3) > 0).all()
    new, mask, adv = _case()
    with_kl = ppo_loss(new, new.detach(), adv, mask, 1.0, ref=new.detach(), kl_coef=0.5)
    assert with_kl.kl_sum.item() == 0.0
    moved = ppo_loss(new, new.detach(), adv, mask, 1.0, ref=new.detach() + 0.2, kl_coef=0.5)
    assert moved.kl_sum.item() > 0 and moved.loss.item() > with_kl.loss.item()


def test_sft_loss_is_the_token_mean_nll_over_completion_tokens() -> None:
    logits = torch.randn(2, 4, 11)
    targets = torch.randint(0, 11, (2, 4))
    mask = torch.tensor([[0, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.float32)
    lp = token_logprobs(logits, targets)
    flat = torch.nn.functional.cross_entropy(logits.reshape(-1, 11), targets.reshape(-1), reduction="none")
    expected = (flat * mask.reshape(-1)).sum() / mask.sum()
    assert sft_loss(lp, mask, float(mask.sum())).loss.item() == pytest.approx(expected.item(), rel=1e-6)


def test_sequence_aggregation_weighs_every_sequence_the_same() -> None:
    """A 4-token failure and a 1-token success with opposite advantages: per token the failure's push is 4
    times the success's; per sequence the two sum to zero."""
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
    adv = torch.tensor([-1.0, 1.0])
    new = torch.zeros(2, 4, requires_grad=True)
    token = ppo_loss(new, torch.zeros(2, 4), adv, mask, denom=5.0)
    seq = ppo_loss(new, torch.zeros(2, 4), adv, mask, denom=2.0, weights=sequence_weights(mask))
    assert token.loss.item() == pytest.approx(3 / 5)  # the failure's 4 tokens outweigh the success's 1
    assert seq.loss.item() == pytest.approx(0.0)
    (grad,) = torch.autograd.grad(seq.loss, new)
    assert grad[0].sum().item() == pytest.approx(0.5) and grad[1, 0].item() == pytest.approx(-0.5)
    assert torch.equal(sequence_weights(torch.zeros(1, 3)), torch.zeros(1, 3))  # no completion: no weight
