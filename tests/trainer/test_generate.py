"""Batched sampling: per-row stopping, logprob convention (a full forward recomputes them), seeds, top-p."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import torch

from envfarm.errors import ConfigError
from envfarm.trainer.generate import GenRequest, generate, generate_batch
from envfarm.trainer.model import KVCache
from envfarm.trainer.policy import Policy, load_policy
from envfarm.trainer.prefix import PrefixCache

torch.set_num_threads(2)
TINY = {"d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64, "max_context": 128}


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy("tiny-cpu", overrides=TINY, device="cpu", seed=0)


def recompute(policy: Policy, prompt: list[int], completion: tuple[int, ...]) -> list[float]:
    ids = torch.tensor([prompt + list(completion)])
    with torch.no_grad():
        logp = torch.log_softmax(policy.module(ids).float(), -1)[0]
    return [logp[len(prompt) - 1 + i, t].item() for i, t in enumerate(completion)]


@pytest.mark.parametrize("padded", [True, False])
def test_logprobs_equal_a_full_forward_of_the_returned_tokens(policy: Policy, padded: bool) -> None:
    prompts = [policy.encode_prompt([{"role": "user", "content": "What is 3*4?"}])]
    prompts.append([65, 66, 67] if padded else prompts[0][::-1])  # other lengths: left padding
    out = generate(policy, prompts, n=3, temperature=0.8, top_p=0.9, max_tokens=24,
                   generator=torch.Generator().manual_seed(0))
    assert [len(s) for s in out] == [3, 3] and out[0] != out[1]
    for prompt, samples in zip(prompts, out, strict=True):
        for s in samples:
            assert len(s.token_ids) == len(s.logprobs) and 1 <= len(s.token_ids) <= 24
            assert max(abs(a - b) for a, b in zip(recompute(policy, prompt, s.token_ids), s.logprobs,
                                                     strict=True)) < 1e-4


def test_bf16_autocast_path_runs(policy: Policy) -> None:
    """The GPU path (bf16 autocast, bf16 KV cache), exercised on the CPU: logprobs near the fp32 ones."""
    prompt = policy.encode_prompt([{"role": "user", "content": "What is 3*4?"}])
    reqs = [GenRequest(prompt, n=2, max_tokens=8, generator=torch.Generator().manual_seed(0)),
            GenRequest([1, 2, 3], max_tokens=8)]
    gen = generate_batch(policy, reqs, autocast=True, check_every=4)
    for s in gen.samples[0]:
        rec = recompute(policy, prompt, s.token_ids)
        assert max(abs(a - b) for a, b in zip(rec, s.logprobs, strict=True)) < 0.1


def test_rows_stop_at_eos_and_length(policy: Policy) -> None:
    eos = policy.tokenizer.eos_id
    with torch.no_grad():  # make eos overwhelmingly likely: every row stops after one token
        policy.module.embed.weight[eos] *= 0
        saved = policy.module.norm.weight.clone()
    out = generate(policy, [[1, 2, 3]], max_tokens=5, generator=torch.Generator().manual_seed(0))
    for s in out[0]:
        assert s.finish_reason in ("stop", "length")
        assert (s.token_ids[-1] == eos) == (s.finish_reason == "stop")
        assert eos not in s.token_ids[:-1]
    with torch.no_grad():
        policy.module.norm.weight.copy_(saved)


def test_same_seed_same_samples_and_greedy_is_deterministic(policy: Policy) -> None:
    prompt = [[10, 20, 30, 40]]
    a = generate(policy, prompt, n=2, max_tokens=16, generator=torch.Generator().manual_seed(5))
    b = generate(policy, prompt, n=2, max_tokens=16, generator=torch.Generator().manual_seed(5))
    c = generate(policy, prompt, n=2, max_tokens=16, generator=torch.Generator().manual_seed(6))
    assert a == b and a != c
    g1 = generate(policy, prompt, temperature=0, max_tokens=16)
    g2 = generate(policy, prompt, temperature=0, max_tokens=16)
    assert g1 == g2


def test_mixed_requests_in_one_batch(policy: Policy) -> None:
    reqs = [GenRequest([1, 2, 3], n=2, max_tokens=4, generator=torch.Generator().manual_seed(1)),
            GenRequest(list(range(40)), temperature=0, max_tokens=9),
            GenRequest([7] * 126, max_tokens=50)]  # clipped to the 2 slots left in the context
    gen = generate_batch(policy, reqs)
    assert gen.rows == 4 and [len(s) for s in gen.samples] == [2, 1, 1]
    assert all(len(s.token_ids) <= 4 for s in gen.samples[0])
    assert len(gen.samples[2][0].token_ids) <= 2
    alone = generate_batch(policy, [GenRequest([1, 2, 3], n=2, max_tokens=4,
                                               generator=torch.Generator().manual_seed(1))]).samples[0]
    assert [s.token_ids for s in alone] == [s.token_ids for s in gen.samples[0]]  # batch mates do not matter


def test_bad_requests(policy: Policy) -> None:
    with pytest.raises(ConfigError, match="no room"):
        generate(policy, [[1] * 128])
    with pytest.raises(ConfigError, match="top_p"):
        generate(policy, [[1]], top_p=0)


def test_prefix_cache_reuses_the_last_turn_and_changes_nothing(policy: Policy) -> None:
    cache = PrefixCache(min_tokens=4)
    p1 = policy.encode_prompt([{"role": "user", "content": "What is 3*4? Use the calc tool, then submit."}])
    first = generate_batch(policy, [GenRequest(p1, max_tokens=8, generator=torch.Generator().manual_seed(0))],
                           prefix_cache=cache)
    s1 = first.samples[0][0]
    assert first.cached_tokens == 0 and len(cache) == 1
    p2 = p1 + list(s1.token_ids) + policy.tokenizer.encode("<|tool|>12<|eot|><|assistant|>")
    fresh = policy.encode_prompt([{"role": "user", "content": "Something else entirely, and longer " * 2}])
    reqs = [GenRequest(p2, n=2, max_tokens=8, generator=torch.Generator().manual_seed(1)),
            GenRequest(fresh, max_tokens=8), GenRequest(p1[:-3], max_tokens=8)]
    second = generate_batch(policy, reqs, prefix_cache=cache)
    reused = len(p1) + len(s1.token_ids) - 1
    assert second.cached_tokens == 2 * reused + len(p1) - 4  # p1[:-3] reuses all but its last token
    for req, samples in zip(reqs, second.samples, strict=True):
        for s in samples:
            rec = recompute(policy, list(req.prompt), s.token_ids)
            assert max(abs(a - b) for a, b in zip(rec, s.logprobs, strict=True)) < 1e-4
    greedy = [GenRequest(p2, temperature=0, max_tokens=8), GenRequest(fresh, temperature=0, max_tokens=8)]
    with_cache = generate_batch(policy, greedy, prefix_cache=cache)
    without = generate_batch(policy, greedy)
    assert with_cache.cached_tokens > 0
    assert [s.token_ids for x in with_cache.samples for s in x] == \
        [s.token_ids for x in without.samples for s in x]
    policy.version = 1  # other weights: stored keys/values are stale
    try:
        assert generate_batch(policy, greedy, prefix_cache=cache).cached_tokens == 0
    finally:
        policy.version = 0


def test_finished_rows_leave_the_batch_and_everything_still_adds_up(policy: Policy,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    sizes: list[int] = []
    select = KVCache.select
    monkeypatch.setattr(KVCache, "select", lambda c, index: sizes.append(len(index)) or select(c, index))
    cache = PrefixCache(min_tokens=4)
    prompts = [policy.encode_prompt([{"role": "user", "content": f"Question number {i}, please."}])
               for i in range(4)]
    streamed: dict[int, list[tuple[int, float]]] = {0: [], 3: []}
    def hook(i: int) -> Any:
        return (lambda k, t, lp, top: streamed[i].append((t, lp))) if i in streamed else None

    reqs = [GenRequest(p, max_tokens=2 if i < 3 else 20, on_token=hook(i)) for i, p in enumerate(prompts)]
    gen = generate_batch(policy, reqs, prefix_cache=cache, generator=torch.Generator().manual_seed(0))
    assert [len(s[0].token_ids) for s in gen.samples] == [2, 2, 2, 20]
    assert gen.steps == 19 and sizes == [1]  # the last row went on alone after the others finished
    for i, (p, samples) in enumerate(zip(prompts, gen.samples, strict=True)):
        s = samples[0]
        assert close(recompute(policy, p, s.token_ids), s.logprobs)
        if i in streamed:
            assert streamed[i] == list(zip(s.token_ids, s.logprobs, strict=True))
    follow = [p + list(s[0].token_ids) + [65, 66] for p, s in zip(prompts, gen.samples, strict=True)]
    again = generate_batch(policy, [GenRequest(f, max_tokens=4) for f in follow], prefix_cache=cache)
    assert again.cached_tokens == sum(len(f) - 3 for f in follow)  # prompt + completion[:-1] were stored
    for f, samples in zip(follow, again.samples, strict=True):
        assert close(recompute(policy, f, samples[0].token_ids), samples[0].logprobs)


def close(a: Sequence[float], b: Sequence[float], tol: float = 1e-4) -> bool:
    return max(abs(x - y) for x, y in zip(a, b, strict=True)) < tol


def test_top_logprobs_are_the_model_distributions_best(policy: Policy) -> None:
    prompt = [5, 6, 7, 8]
    gen = generate_batch(policy, [GenRequest(prompt, max_tokens=6, top_logprobs=3), GenRequest([9, 9])])
    s = gen.samples[0][0]
    assert len(s.top_logprobs) == len(s.token_ids) and gen.samples[1][0].top_logprobs == ()
    with torch.no_grad():
        logp = torch.log_softmax(policy.module(torch.tensor([prompt + list(s.token_ids)])).float(), -1)[0]
    for i, alts in enumerate(s.top_logprobs):
        best = logp[len(prompt) - 1 + i].topk(3)
        assert [a for a, _ in alts] == best.indices.tolist()
        assert close([lp for _, lp in alts], best.values.tolist())
