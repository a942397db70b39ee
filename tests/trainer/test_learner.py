"""The optimizer step: SFT learns, gradient accumulation changes nothing, on-policy RL has ratio 1."""

from __future__ import annotations

import pytest
import torch
from learner_support import params, rl_batch, tiny_learner, tiny_policy

from envfarm.errors import ConfigError, TrainerError
from envfarm.trainer.learner import Learner, LearnerConfig
from envfarm.trainer.samples import TokenSample

torch.set_num_threads(1)


def _demos() -> list[TokenSample]:
    text = [b"calc(2+3)", b"calc(4*5)", b"submit(42)", b"calc(9-1)"]
    return [TokenSample.turn(tuple(b"Q: solve "), (*t, 257)) for t in text]


def test_sft_loss_decreases_in_a_few_steps() -> None:
    learner = tiny_learner(lr=3e-3)
    losses = [learner.update(_demos(), "sft").loss for _ in range(15)]
    assert losses[-1] < 0.7 * losses[0]
    assert learner.step == 15


def test_gradient_accumulation_gives_the_same_step_as_one_batch() -> None:
    a, b = tiny_learner(micro_batch_tokens=1_000_000), tiny_learner(micro_batch_tokens=12)
    samples = rl_batch(a.module)
    sa, sb = a.update(samples, "rl"), b.update(samples, "rl")
    assert sa.tokens == sb.tokens and sa.loss == pytest.approx(sb.loss, abs=1e-6)
    assert torch.allclose(params(a.module), params(b.module), atol=1e-6)


def test_on_policy_rl_update_has_ratio_one_and_no_clipping() -> None:
    learner = tiny_learner(lr=1e-3)
    before = params(learner.module).clone()
    stats = learner.update(rl_batch(learner.module), "rl")
    assert stats.ratio_mean == pytest.approx(1.0, abs=1e-4)
    assert stats.clip_frac == 0.0 and stats.kl is None
    assert not torch.equal(before, params(learner.module))


def test_positive_advantages_raise_their_logprobs() -> None:
    learner = tiny_learner(lr=1e-2)
    samples = [s for s in rl_batch(learner.module, n=4) if s.advantage > 0]
    from learner_support import own_logprobs

    before = [sum(s.logprobs or ()) for s in samples]
    learner.update(samples, "rl")
    after = [sum(own_logprobs(learner.module, s.ids[:s.spans[0][0]], s.ids[s.spans[0][0]:])) for s in samples]
    assert all(x > y for x, y in zip(after, before, strict=True))


def test_kl_to_the_reference_is_reported_and_zero_on_the_first_step() -> None:
    learner = tiny_learner(kl_coef=0.1)
    first = learner.update(rl_batch(learner.module), "rl")
    assert first.kl == pytest.approx(0.0, abs=1e-7)
    second = learner.update(rl_batch(learner.module, seed=1), "rl")
    assert second.kl is not None and second.kl > 0


def test_sequence_aggregation_keeps_a_long_failure_from_eroding_the_call_syntax() -> None:
    """A failed episode that retried three times (A < 0, the tool-call prefix in every turn) and a solved
    one-turn episode (A > 0) from the same prompt: per-token aggregation pushes the shared prefix down (three
    occurrences against one); per-sequence aggregation does not."""
    from learner_support import own_logprobs

    prefix = tuple(b"<tool_call>")
    prompt, retry = tuple(b"Q: "), tuple(b"E: ")
    bad, good = (*prefix, *b"garbage", 257), (*prefix, *b"ok", 257)
    shifts = {}
    for agg in ("token", "sequence"):
        learner = tiny_learner(lr=3e-3, loss_agg=agg)
        m = learner.module
        fail = TokenSample.turn(prompt, bad, own_logprobs(m, prompt, bad), advantage=-1.0)
        for _ in range(2):
            context = (*fail.ids, *retry)
            extended = fail.extend(context, bad, own_logprobs(m, context, bad), None)
            assert extended is not None
            fail = extended
        win = TokenSample.turn(prompt, good, own_logprobs(m, prompt, good), advantage=1.0)
        before = sum(own_logprobs(m, prompt, prefix))
        for _ in range(3):
            learner.update([fail, win], "rl")
        shifts[agg] = sum(own_logprobs(m, prompt, prefix)) - before
    assert shifts["token"] < 0 < shifts["sequence"], shifts
    with pytest.raises(ConfigError, match="loss_agg"):
        LearnerConfig(loss_agg="episode")  # type: ignore[arg-type]


def test_bad_input_is_a_trainer_error() -> None:
    policy = tiny_policy()
    learner = Learner(policy.module, LearnerConfig(), pad_id=policy.tokenizer.pad_id)
    with pytest.raises(TrainerError, match="no samples"):
        learner.update([], "rl")
    with pytest.raises(TrainerError, match="not finite"):
        learner.update([TokenSample.turn((1, 2), (3,), (float("nan"),), advantage=1.0)], "rl")
