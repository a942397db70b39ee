"""Prefix caching for the built-in model: keys/values of recent conversations, reused by the next turn.

A farm episode's turn k+1 prompt starts with turn k's prompt and completion, so the server keeps each
sampled row's keys/values (``prompt + completion[:-1]``) and, for a new prompt, copies those of the longest
stored common prefix into the batch's cache instead of recomputing them; only the rest is prefilled.
Rows are prefilled in groups of similar uncached length (contiguous in the batch), so one fresh prompt does
not force a full prefill on rows that have a cached prefix. Entries are evicted least-recently-used past
``max_bytes``; the cache empties itself when the policy's weight version changes (``sync``): keys/values of
other weights are wrong. Keys are post-RoPE at each token's real position, so they are valid at any slot.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from .model import KVCache


@dataclass(frozen=True)
class Entry:
    """One stored sequence: its tokens and their keys/values, [layers, heads, tokens, head_dim] each."""

    tokens: np.ndarray
    k: Tensor
    v: Tensor

    @property
    def nbytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()


@dataclass(frozen=True)
class Hit:
    """How many leading tokens of a prompt have stored keys/values (0: none) and where."""

    tokens: int = 0
    entry: Entry | None = None


class PrefixCache:
    """LRU store of keys/values by token sequence; used from the one thread that runs the model."""

    def __init__(self, max_bytes: int = 256 << 20, min_tokens: int = 32) -> None:
        self.max_bytes, self.min_tokens = max_bytes, min_tokens
        self._entries: OrderedDict[int, Entry] = OrderedDict()
        self._next = 0
        self.bytes = 0
        self.version: object = None
        self.lookups = self.hits = self.reused_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def sync(self, version: object) -> None:
        """Empty the cache when the weights changed since it was filled."""
        if version != self.version:
            self.clear()
            self.version = version

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0

    def lookup(self, prompt: Sequence[int]) -> Hit:
        """The longest stored prefix of ``prompt`` (leaving at least its last token to compute)."""
        self.lookups += 1
        a = np.asarray(prompt, dtype=np.int64)
        best, best_key = Hit(), -1
        for key, e in self._entries.items():
            n = min(len(a) - 1, len(e.tokens))
            if n <= best.tokens:
                continue
            diff = np.flatnonzero(a[:n] != e.tokens[:n])
            common = int(diff[0]) if diff.size else n
            if common > best.tokens:
                best, best_key = Hit(common, e), key
        if best.tokens < self.min_tokens:
            return Hit()
        self._entries.move_to_end(best_key)
        self.hits += 1
        self.reused_tokens += best.tokens
        return best

    def store(self, tokens: Sequence[int], k: Tensor, v: Tensor) -> None:
        """Keep ``tokens`` with their keys/values (copied); drop stored prefixes of it; evict past budget."""
        a = np.asarray(tokens, dtype=np.int64)
        if len(a) < self.min_tokens:
            return
        for key, e in list(self._entries.items()):
            if len(e.tokens) <= len(a) and np.array_equal(e.tokens, a[:len(e.tokens)]):
                self._drop(key)
        entry = Entry(a, k.clone(), v.clone())
        if entry.nbytes > self.max_bytes:
            return
        self._entries[self._next] = entry
        self._next += 1
        self.bytes += entry.nbytes
        while self.bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))

    def _drop(self, key: int) -> None:
        self.bytes -= self._entries.pop(key).nbytes


def prefill(module: torch.nn.Module, ids: Tensor, valid: Tensor, positions: Tensor, cache: KVCache,
            hits: Sequence[Hit], lengths: Sequence[int]) -> Tensor:
    """Fill ``cache`` slots [0, P) for left-padded ``ids`` [R, P] using ``hits`` (rows sorted by uncached
    length, longest first); returns the last position's logits [R, vocab]."""
    P = ids.shape[1]
    parts = []
    for start, stop, window in _groups([n - h.tokens for n, h in zip(lengths, hits, strict=True)]):
        view = cache.rows(start, stop, P - window)
        if P > window:  # the token before the window (the model's token shift reads it)
            view.last.copy_(ids[start:stop, P - window - 1])
        for j in range(start, stop):
            n_past = lengths[j] - window  # tokens before the window: all cached (window >= uncached length)
            entry = hits[j].entry
            if n_past > 0 and entry is not None:
                view.k[:, j - start, :, P - lengths[j]:P - window] = entry.k[:, :, :n_past]
                view.v[:, j - start, :, P - lengths[j]:P - window] = entry.v[:, :, :n_past]
        logits = module(ids[start:stop, P - window:], positions=positions[start:stop, P - window:],
                        key_mask=valid[start:stop, :P], cache=view, last_only=True)
        parts.append(logits[:, -1])
    cache.length = P
    return torch.cat(parts)


def _groups(uncached: Sequence[int]) -> list[tuple[int, int, int]]:
    """(start, stop, window) runs of rows (sorted longest first) whose uncached lengths are within 2x."""
    out: list[tuple[int, int, int]] = []
    start = 0
    for j in range(1, len(uncached) + 1):
        if j == len(uncached) or uncached[j] * 2 < uncached[start]:
            out.append((start, j, uncached[start]))
            start = j
    return out


def store_rows(prefix: PrefixCache, cache: KVCache, prompts: Sequence[Sequence[int]],
               completions: Sequence[Sequence[int]], prompt_slots: int) -> None:
    """Store each row's prompt + completion[:-1] (the tokens whose keys/values were computed)."""
    for j, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
        fed = list(completion[:-1])
        first, last = prompt_slots - len(prompt), prompt_slots + len(fed)
        prefix.store([*prompt, *fed], cache.k[:, j, :, first:last], cache.v[:, j, :, first:last])


__all__ = ["Entry", "Hit", "PrefixCache", "prefill", "store_rows"]
