"""Trajectories -> samples: GRPO advantages per group, dropped episodes and turns, packing, padding."""

from __future__ import annotations

import pytest
import torch
from learner_support import tiny_policy, trajectory

from envfarm.trainer.samples import (
    TokenSample,
    collate,
    group_advantages,
    micro_batches,
    render_messages,
    rl_samples,
)


def test_group_advantages_are_centred_and_scaled_per_group() -> None:
    assert group_advantages([1.0, 0.0, 1.0, 0.0]) == pytest.approx([1.0, -1.0, 1.0, -1.0], abs=1e-5)
    assert group_advantages([1.0, 0.0, 0.0, 0.0], normalise_std=False) == pytest.approx([0.75, -0.25, -0.25,
                                                                                          -0.25])


@pytest.mark.parametrize("rewards", [[1.0, 1.0, 1.0], [0.0, 0.0], [0.5]])
def test_zero_variance_groups_give_zero(rewards: list[float]) -> None:
    assert group_advantages(rewards) == [0.0] * len(rewards)


def test_groups_are_scored_separately_and_broken_episodes_are_dropped_not_zero() -> None:
    g1 = [trajectory(0, 7, 1.0), trajectory(1, 7, 0.0), trajectory(2, 7, 0.0, status="infra_error")]
    g2 = [trajectory(3, 8, 1.0), trajectory(4, 8, 1.0), trajectory(5, 8, 0.0, status="policy_error")]
    samples, counts = rl_samples([g1, g2])
    assert counts["not_completed"] == 2
    assert counts["zero_adv_groups"] == 1  # g2: both completed episodes succeeded
    by_episode = {s.episode_id: s.advantage for s in samples}
    # had the infra error counted as reward 0, g1's mean would be 1/3 and its advantages asymmetric
    assert by_episode["run:000000"] == pytest.approx(1.0, abs=1e-5)
    assert by_episode["run:000001"] == pytest.approx(-1.0, abs=1e-5)
    assert by_episode["run:000003"] == by_episode["run:000004"] == 0.0


def test_turns_of_an_episode_are_packed_into_one_sequence() -> None:
    (s,), counts = rl_samples([[trajectory(0, 1, 1.0, turns=2)]])
    assert counts["turns"] == 2
    assert len(s.spans) == 2 and s.logprobs is not None and len(s.logprobs) == 6
    t = trajectory(0, 1, 1.0, turns=2)
    assert s.ids == t.turns[1].prompt_token_ids + t.turns[1].token_ids
    for (start, end), turn in zip(s.spans, t.turns, strict=True):
        assert s.ids[start:end] == turn.token_ids


def test_a_turn_that_does_not_continue_the_previous_one_starts_a_new_sequence() -> None:
    a = TokenSample.turn((1, 2), (3, 4), (-1.0, -1.0))
    assert a.extend((1, 2, 3, 4, 5), (6,), (-2.0,), 0) is not None
    assert a.extend((1, 9, 3, 4, 5), (6,), (-2.0,), 0) is None


def test_stale_turns_and_turns_without_tokens_are_dropped_and_counted() -> None:
    old, new = trajectory(0, 3, 1.0, version=1), trajectory(1, 3, 0.0, version=4)
    samples, counts = rl_samples([[old, new]], current_version=5, max_staleness=2)
    assert counts["stale"] == 2 and [s.episode_id for s in samples] == ["run:000001"]
    bare = trajectory(2, 4, 1.0)
    bare = type(bare)(**{**bare.__dict__, "turns": tuple(t.__class__(**{**t.__dict__, "token_ids": None})
                                                          for t in bare.turns)})
    samples, counts = rl_samples([[bare, trajectory(3, 4, 0.0)]])
    assert counts["no_tokens"] == 2 and len(samples) == 1


def test_collate_aligns_targets_mask_and_behaviour_logprobs() -> None:
    s = TokenSample((5, 6, 7, 8, 9, 10), ((2, 4), (5, 6)), (-0.1, -0.2, -0.3), advantage=2.0)
    b = collate([s, TokenSample.turn((1,), (2, 3))], pad_id=0)
    assert b.input_ids[0].tolist() == [5, 6, 7, 8, 9] and b.targets[0].tolist() == [6, 7, 8, 9, 10]
    assert b.mask[0].tolist() == [0, 1, 1, 0, 1]  # targets 7, 8 and 10
    assert b.old_logprobs[0].tolist() == pytest.approx([0, -0.1, -0.2, 0, -0.3])
    assert b.mask[1].tolist() == [1, 1, 0, 0, 0] and b.input_ids[1].tolist()[:2] == [1, 2]
    assert b.tokens == 5 and b.advantages.tolist() == [2.0, 0.0]


def test_micro_batches_respect_the_token_budget_and_keep_every_sample() -> None:
    samples = [TokenSample.turn(tuple(range(1, 3 + i)), (7, 8)) for i in range(10)]
    batches = micro_batches(samples, pad_id=0, max_tokens=30)
    assert sum(b.samples for b in batches) == 10
    assert all(b.input_ids.numel() <= 30 or b.samples == 1 for b in batches)
    assert sum(b.tokens for b in batches) == sum(s.targets for s in samples)


def test_sft_samples_render_with_the_policy_template() -> None:
    policy = tiny_policy()
    call = {"id": "c0", "type": "function", "function": {"name": "calc", "arguments": '{"expr": "1+2"}'}}
    messages = [{"role": "user", "content": "What is 1+2?"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c0", "content": "3"},
                {"role": "assistant", "content": "3"}]
    (s,) = render_messages(messages, [], policy)
    first = policy.encode_completion(messages[1])
    assert s.ids[s.spans[0][0]:s.spans[0][1]] == tuple(first) and first[-1] == policy.tokenizer.eos_id
    assert s.ids == tuple(policy.encode_prompt(messages[:3], []) + policy.encode_completion(messages[3]))
    assert torch.tensor(s.ids).max() < policy.tokenizer.vocab_size
