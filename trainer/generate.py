"""Batched sampling with a KV cache: many prompts (left-padded into one batch), ``n`` samples each.

    samples = generate(policy, [ids_a, ids_b], n=2, temperature=1.0, max_tokens=64, generator=g)
    samples[0][1].token_ids, samples[0][1].logprobs, samples[0][1].finish_reason

    out = generate_batch(policy, [GenRequest(ids_a, temperature=0.7, seed=1), GenRequest(ids_b, n=4)])

Logprob convention (see ``base.py``): ``Sample.logprobs[i]`` is ``log_softmax(logits)[token]`` of the raw
model logits at temperature 1, before top-p, under the weights that sampled (what a full forward of
``prompt + token_ids`` by the learner gives, within float tolerance). Sampling itself uses
``softmax(logits / temperature)`` truncated to the top-p nucleus; ``temperature == 0`` is greedy.

One prefill of the left-padded batch, then one decode forward per step for all rows; rows stop at eos or
their ``max_tokens`` (clipped to the context left after their prompt). Tokens stay on the device until the
end; the only host sync per step is the all-rows-done check (every ``check_every`` steps on GPU).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from envfarm.errors import ConfigError

from .base import Sample
from .model import KVCache, Transformer
from .policy import Policy
from .prefix import Hit, PrefixCache, prefill, store_rows


@dataclass(frozen=True)
class GenRequest:
    """One prompt and how to sample from it."""

    prompt: Sequence[int]
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 64
    generator: torch.Generator | None = None
    """Random source for this request's rows; None: the batch's shared one."""
    top_logprobs: int = 0
    """Also return this many most likely alternatives per token (``Sample.top_logprobs``)."""
    on_token: Callable[[int, int, float, list[tuple[int, float]]], None] | None = None
    """Streaming: called from the generating thread as ``on_token(sample_index, token_id, logprob, top)``
    for each new token of each of this request's samples, in order (eos included); ``top`` holds
    ``top_logprobs`` (id, logprob) pairs. Costs a host sync per step."""


@dataclass(frozen=True)
class Generation:
    """What one batched call produced: ``samples[request][j]`` plus its cost."""

    samples: list[list[Sample]]
    rows: int
    prompt_tokens: int
    """Real (unpadded) prompt tokens of all rows."""
    completion_tokens: int
    steps: int
    """Decode forward passes after the prefill."""
    seconds: float
    cached_tokens: int = 0
    """Prompt tokens whose keys/values came from the prefix cache instead of the prefill."""


def generate(policy: Policy, prompts: Sequence[Sequence[int]], *, n: int = 1, temperature: float = 1.0,
             top_p: float = 1.0, max_tokens: int = 64, generator: torch.Generator | None = None,
             ) -> list[list[Sample]]:
    """``n`` samples for each prompt, all in one batch; see the module docstring."""
    reqs = [GenRequest(p, n, temperature, top_p, max_tokens) for p in prompts]
    return generate_batch(policy, reqs, generator=generator).samples


def check_request(policy: Policy, req: GenRequest) -> int:
    """The number of new tokens ``req`` may produce; a ConfigError when it cannot produce any."""
    if not req.prompt:
        raise ConfigError("empty prompt")
    room = policy.max_context - len(req.prompt)
    if room < 1:
        raise ConfigError(f"prompt of {len(req.prompt)} tokens leaves no room in the model's context of "
                          f"{policy.max_context} tokens")
    if req.n < 1 or req.max_tokens < 1 or req.temperature < 0 or not 0 < req.top_p <= 1 or \
            not 0 <= req.top_logprobs <= 20:
        raise ConfigError(f"need n >= 1, max_tokens >= 1, temperature >= 0 and 0 < top_p <= 1; got "
                          f"n={req.n}, max_tokens={req.max_tokens}, temperature={req.temperature}, "
                          f"top_p={req.top_p} (and 0 <= top_logprobs <= 20)")
    return min(req.max_tokens, room)


def generate_batch(policy: Policy, requests: Sequence[GenRequest], *,
                   generator: torch.Generator | None = None, check_every: int | None = None,
                   autocast: bool | None = None, prefix_cache: PrefixCache | None = None) -> Generation:
    """All ``requests`` in one batch (each repeated ``n`` times); see the module docstring. With a
    ``prefix_cache`` (built-in model only) stored prompt prefixes are reused and every row is stored."""
    t0 = time.perf_counter()
    dev, tok = policy.device, policy.tokenizer
    budgets = [check_request(policy, r) for r in requests]
    if prefix_cache is not None and not isinstance(policy.module, Transformer):
        prefix_cache = None
    if prefix_cache is not None:
        prefix_cache.sync(policy.version)
        req_hits = [prefix_cache.lookup(r.prompt) for r in requests]
    else:
        req_hits = [Hit()] * len(requests)
    rows = [(i, r) for i, r in enumerate(requests) for _ in range(r.n)]
    rows.sort(key=lambda row: req_hits[row[0]].tokens - len(row[1].prompt))  # longest uncached first
    R = len(rows)
    new = torch.tensor([budgets[i] for i, _ in rows], device=dev)
    max_new = max(budgets[i] for i, _ in rows)
    ids, valid = _layout([r.prompt for _, r in rows], tok.pad_id, max_new, dev)
    prompt_len = ids.shape[1]
    sampler = _Sampler(rows, dev, generator)
    every = check_every or (1 if dev.type == "cpu" else 8)
    use_autocast = dev.type == "cuda" if autocast is None else autocast
    amp = torch.autocast(dev.type, dtype=torch.bfloat16) if use_autocast else contextlib.nullcontext()
    with torch.inference_mode(), amp:
        cache_dtype = torch.bfloat16 if use_autocast else None
        hits = [req_hits[i] for i, _ in rows] if prefix_cache is not None else None
        first: dict[tuple[int, ...], int] = {}
        src = [first.setdefault(tuple(r.prompt), j) for j, (_, r) in enumerate(rows)]
        out_ids, out_lp, steps, cache, tops = _decode(policy, ids, valid, new, max_new, sampler, every,
                                                      _emitter(rows), cache_dtype, hits, src,
                                                      keep_all=prefix_cache is not None)
    out_ids_l, out_lp_l = out_ids.tolist(), out_lp.tolist()
    top_v, top_i = (tops[0].tolist(), tops[1].tolist()) if tops is not None else ([], [])
    samples: list[list[Sample]] = [[] for _ in requests]
    completion = 0
    completions = []
    for j, (i, r) in enumerate(rows):
        toks, lps = _trim(out_ids_l[j], out_lp_l[j], tok.eos_id, budgets[i])
        completion += len(toks)
        completions.append(toks)
        reason = "stop" if toks and toks[-1] == tok.eos_id else "length"
        alts = tuple(tuple(zip(top_i[j][s][:r.top_logprobs], top_v[j][s][:r.top_logprobs], strict=True))
                     for s in range(len(toks))) if r.top_logprobs else ()
        samples[i].append(Sample(tuple(toks), tuple(lps), reason, alts))
    prompt_tokens = sum(len(r.prompt) for _, r in rows)
    cached = sum(req_hits[i].tokens for i, _ in rows)
    if prefix_cache is not None:
        with torch.inference_mode():
            store_rows(prefix_cache, cache, [r.prompt for _, r in rows], completions, prompt_len)
    return Generation(samples, R, prompt_tokens, completion, steps, time.perf_counter() - t0, cached)


Top = tuple[Tensor, Tensor] | None
Emit = Callable[[Tensor, Tensor, Tensor, Tensor, Top], None]


def _emitter(rows: Sequence[tuple[int, GenRequest]]) -> Emit | None:
    """For streaming rows: a per-step hook calling their ``on_token`` for rows still generating."""
    streams, seen = [], [0] * (max((i for i, _ in rows), default=0) + 1)
    for j, (i, r) in enumerate(rows):
        if r.on_token is not None:
            streams.append((j, r.on_token, seen[i], r.top_logprobs))
        seen[i] += 1
    if not streams:
        return None

    def emit(token: Tensor, logprob: Tensor, active: Tensor, index: Tensor, top: Top) -> None:
        toks, lps, act = token.tolist(), logprob.tolist(), active.tolist()
        top_v, top_i = (top[0].tolist(), top[1].tolist()) if top is not None else ([], [])
        where = {row: j for j, row in enumerate(index.tolist())}
        for row, fn, k, n_top in streams:
            j = where.get(row)
            if j is not None and act[j]:
                alts = list(zip(top_i[j][:n_top], top_v[j][:n_top], strict=True)) if n_top else []
                fn(k, toks[j], lps[j], alts)

    return emit


def _layout(prompts: Sequence[Sequence[int]], pad: int, max_new: int, device: torch.device,
            ) -> tuple[Tensor, Tensor]:
    """Left-padded ids [R, P] and the real-token mask [R, P + max_new] (completion slots still False)."""
    P = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), P), pad, dtype=torch.long)
    valid = torch.zeros((len(prompts), P + max_new), dtype=torch.bool)
    for j, p in enumerate(prompts):
        ids[j, P - len(p):] = torch.tensor(list(p), dtype=torch.long)
        valid[j, P - len(p):P] = True
    return ids.to(device), valid.to(device)


def _trim(ids: list[int], lps: list[float], eos: int, budget: int) -> tuple[list[int], list[float]]:
    end = min(budget, len(ids))
    if eos in ids[:end]:
        end = ids.index(eos) + 1
    return ids[:end], lps[:end]


def _prefill(policy: Policy, ids: Tensor, valid: Tensor, positions: Tensor, capacity: int,
             cache_dtype: torch.dtype | None, hits: Sequence[Hit] | None, src: Sequence[int],
             ) -> tuple[Tensor, Any]:
    """(last logits [R, vocab], cache): rows with the same prompt (``src[j]``: the first row with row j's
    prompt) are prefilled once and copied (built-in model); stored prefixes in ``hits`` are reused."""
    module = policy.module
    R, P = ids.shape
    uniq = sorted(set(src))
    dedup = len(uniq) < R and isinstance(module, Transformer)
    if dedup:
        u = torch.tensor(uniq, device=ids.device)
        ids, valid, positions = ids[u], valid[u], positions[u]
        hits = [hits[i] for i in uniq] if hits is not None else None
    n = ids.shape[0]
    cached: Any = module  # the module protocol of base.py: new_cache(batch, capacity, dtype=...)
    cache = cached.new_cache(n, capacity) if cache_dtype is None else \
        cached.new_cache(n, capacity, dtype=cache_dtype)
    if hits is not None and any(h.tokens for h in hits):
        lengths = [int(x) for x in valid[:, :P].sum(1).tolist()]
        logits = prefill(module, ids, valid, positions, cache, hits, lengths)
    else:
        padded = not bool(valid[:, 0].all())
        logits = module(ids, positions=positions, key_mask=valid[:, :P] if padded else None, cache=cache,
                        last_only=True)[:, -1]
    if not dedup:
        return logits, cache
    where = {row: k for k, row in enumerate(uniq)}
    inverse = torch.tensor([where[s] for s in src], device=ids.device)
    return logits.index_select(0, inverse), cache.select(inverse)


def _decode(policy: Policy, ids: Tensor, valid: Tensor, new: Tensor, max_new: int, sampler: _Sampler,
            every: int, emit: Emit | None,
            cache_dtype: torch.dtype | None, hits: Sequence[Hit] | None, src: Sequence[int],
            keep_all: bool = False) -> tuple[Tensor, Tensor, int, Any, Top]:
    """Prefill + decode loop: (tokens [R, max_new], logprobs [R, max_new], decode steps, cache, top
    alternatives ([R, max_new, k] logprobs and ids) or None).
    Finished rows leave the batch once they are half of it; with ``keep_all`` the returned cache still
    holds every row's keys/values (for the prefix cache)."""
    eos, pad = policy.tokenizer.eos_id, policy.tokenizer.pad_id
    R, P = ids.shape
    positions = (valid[:, :P].long().cumsum(1) - 1).clamp(min=0)
    logits, cache = _prefill(policy, ids, valid, positions, P + max_new, cache_dtype, hits, src)
    padded = not bool(valid[:, 0].all())  # left padding: some row's first slot is a pad
    module, full_cache = policy.module, cache
    out_ids = torch.full((R, max_new), pad, dtype=torch.long, device=ids.device)
    out_lp = torch.zeros((R, max_new), dtype=torch.float32, device=ids.device)
    rows = _Rows(valid, positions[:, -1:] + 1, new)
    tops = (torch.zeros((R, max_new, sampler.top_k), device=ids.device),
            torch.zeros((R, max_new, sampler.top_k), dtype=torch.long, device=ids.device)) \
        if sampler.top_k else None
    steps = 0
    for step in range(max_new):
        token, lp, top = sampler(logits)
        token = torch.where(rows.done, pad, token)
        out_ids[rows.index, step], out_lp[rows.index, step] = token, lp
        if tops is not None and top is not None:
            tops[0][rows.index, step], tops[1][rows.index, step] = top
        if emit is not None:
            emit(token, lp, ~rows.done, rows.index, top)
        rows.count += (~rows.done).long()
        rows.done |= (token == eos) | (rows.count >= rows.new)
        if step == max_new - 1 or ((step + 1) % every == 0 and bool(rows.done.all())):
            break
        if (step + 1) % every == 0 and isinstance(cache, KVCache):
            before = rows.index
            keep = rows.shrink(sampler)
            if keep is not None:
                if keep_all and cache is not full_cache:  # the prefix cache stores every row from full_cache
                    full_cache.k[:, before], full_cache.v[:, before] = cache.k, cache.v
                cache, token = cache.select(keep), token[keep]
        rows.valid[:, P + step] = True
        logits = module(token[:, None], positions=rows.next_pos.clamp(max=policy.max_context - 1),
                        key_mask=rows.valid[:, :P + step + 1] if padded else None, cache=cache,
                        last_only=True)[:, -1]
        rows.next_pos = rows.next_pos + 1
        steps += 1
    if keep_all and cache is not full_cache:
        full_cache.k[:, rows.index], full_cache.v[:, rows.index] = cache.k, cache.v
    return out_ids, out_lp, steps, full_cache, tops


class _Rows:
    """Decode state of the rows still in the batch; ``index``: their numbers in the original batch."""

    def __init__(self, valid: Tensor, next_pos: Tensor, new: Tensor) -> None:
        R = valid.shape[0]
        self.index = torch.arange(R, device=valid.device)
        self.valid, self.next_pos, self.new = valid, next_pos, new
        self.done = torch.zeros(R, dtype=torch.bool, device=valid.device)
        self.count = torch.zeros(R, dtype=torch.long, device=valid.device)

    def shrink(self, sampler: _Sampler) -> Tensor | None:
        """Drop finished rows when they are at least half the batch (a seeded request's rows only once
        all of them are done, so its random stream does not depend on its batch mates); the kept rows."""
        droppable = self.done & ~sampler.seeded_pending(self.done)
        n = int(droppable.sum())
        if n < 1 or n * 2 < len(self.index) or n == len(self.index):
            return None
        keep = (~droppable).nonzero().squeeze(1)
        self.index, self.valid, self.next_pos = self.index[keep], self.valid[keep], self.next_pos[keep]
        self.new, self.done, self.count = self.new[keep], self.done[keep], self.count[keep]
        sampler.select(keep)
        return keep


class _Sampler:
    """Per-row temperature/top-p sampling; rows grouped by their random generator."""

    def __init__(self, rows: Sequence[tuple[int, GenRequest]], device: torch.device,
                 shared: torch.Generator | None) -> None:
        self.temps = torch.tensor([max(r.temperature, 1e-6) for _, r in rows], device=device)[:, None]
        self.top_p = torch.tensor([r.top_p for _, r in rows], device=device)[:, None]
        self.use_top_p = any(r.top_p < 1 for _, r in rows)
        self.greedy = torch.tensor([r.temperature == 0 for _, r in rows], device=device)
        self.any_greedy = any(r.temperature == 0 for _, r in rows)
        self.top_k = max(r.top_logprobs for _, r in rows)
        self.device = device
        self.generators: list[torch.Generator | None] = []
        self.gid: list[int] = []  # each row's index into self.generators
        self.seeded: list[bool] = []
        for _, r in rows:
            g = r.generator if r.generator is not None else shared
            if not any(g is h for h in self.generators):
                self.generators.append(g)
                self.seeded.append(r.generator is not None)
            self.gid.append(next(k for k, h in enumerate(self.generators) if h is g))
        self._group()

    def _group(self) -> None:
        members: dict[int, list[int]] = {}
        for j, k in enumerate(self.gid):
            members.setdefault(k, []).append(j)
        whole = len(members) == 1
        self.groups = [(self.generators[k], None if whole else torch.tensor(idx, device=self.device))
                       for k, idx in members.items()]
        self.seeded_groups = [torch.tensor(idx, device=self.device) for k, idx in members.items()
                              if self.seeded[k] and len(idx) > 1]

    def seeded_pending(self, done: Tensor) -> Tensor:
        """Rows of seeded requests (more than one row) that still have a row generating."""
        out = torch.zeros_like(done)
        for idx in self.seeded_groups:
            out[idx] = ~bool(done[idx].all())
        return out

    def select(self, keep: Tensor) -> None:
        """Keep only rows ``keep`` (the batch shrank)."""
        self.temps, self.top_p, self.greedy = self.temps[keep], self.top_p[keep], self.greedy[keep]
        self.gid = [self.gid[j] for j in keep.tolist()]
        self._group()

    def __call__(self, logits: Tensor) -> tuple[Tensor, Tensor, Top]:
        logits = logits.float()
        logp = torch.log_softmax(logits, dim=-1)
        probs = torch.softmax(logits / self.temps, dim=-1)
        if self.use_top_p:
            probs = _nucleus(probs, self.top_p)
        token = torch.empty(logits.shape[0], dtype=torch.long, device=logits.device)
        for g, idx in self.groups:
            if idx is None:
                token = torch.multinomial(probs, 1, generator=g).squeeze(1)
            else:
                token[idx] = torch.multinomial(probs[idx], 1, generator=g).squeeze(1)
        if self.any_greedy:
            token = torch.where(self.greedy, logits.argmax(-1), token)
        top = logp.topk(self.top_k, dim=-1) if self.top_k else None
        return token, logp.gather(1, token[:, None]).squeeze(1), (top[0], top[1]) if top is not None else None


def _nucleus(probs: Tensor, top_p: Tensor) -> Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches ``top_p`` (per row), renormalised."""
    sorted_p, order = probs.sort(dim=-1, descending=True)
    before = sorted_p.cumsum(-1) - sorted_p
    sorted_p = torch.where(before < top_p, sorted_p, torch.zeros_like(sorted_p))
    kept = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    return kept / kept.sum(-1, keepdim=True)


__all__ = ["GenRequest", "Generation", "check_request", "generate", "generate_batch"]
