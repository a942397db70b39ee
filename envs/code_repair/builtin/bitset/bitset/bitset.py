"""BitSet: a set of non-negative integers backed by a list of 64-bit words (bit i of word w is w*64 + i)."""

from __future__ import annotations

from typing import Iterable, Iterator

WORD = 64
MASK = (1 << WORD) - 1


def _popcount(x: int) -> int:
    return bin(x).count("1")


class BitSet:
    __slots__ = ("_words",)

    def __init__(self, items: Iterable[int] = ()):
        self._words: list[int] = []
        for i in items:
            self.add(i)

    @classmethod
    def _from_words(cls, words: list[int]) -> "BitSet":
        bs = cls()
        bs._words = words
        bs._trim()
        return bs

    def _trim(self) -> None:
        while self._words and self._words[-1] == 0:
            self._words.pop()

    @staticmethod
    def _check(i: int) -> None:
        if not isinstance(i, int) or isinstance(i, bool):
            raise TypeError(f"bitset members are ints, got {type(i).__name__}")
        if i < 0:
            raise ValueError(f"bitset members are non-negative, got {i}")

    # -- element operations ----------------------------------------------------------------------------
    def add(self, i: int) -> None:
        self._check(i)
        w, b = divmod(i, WORD)
        if w >= len(self._words):
            self._words.extend([0] * (w + 1 - len(self._words)))
        self._words[w] |= 1 << b

    def discard(self, i: int) -> None:
        self._check(i)
        w, b = divmod(i, WORD)
        if w < len(self._words):
            self._words[w] &= ~(1 << b) & MASK
            self._trim()

    def remove(self, i: int) -> None:
        if i not in self:
            raise KeyError(i)
        self.discard(i)

    def __contains__(self, i: object) -> bool:
        if not isinstance(i, int) or i < 0:
            return False
        w, b = divmod(i, WORD)
        return w < len(self._words) and bool(self._words[w] >> b & 1)

    def __len__(self) -> int:
        return sum(_popcount(w) for w in self._words)

    def __iter__(self) -> Iterator[int]:
        for wi, word in enumerate(self._words):
            base = wi * WORD
            while word:
                low = word & -word
                yield base + low.bit_length() - 1
                word ^= low

    def __bool__(self) -> bool:
        return bool(self._words)

    def max(self) -> int:
        if not self._words:
            raise ValueError("max() of empty BitSet")
        return (len(self._words) - 1) * WORD + self._words[-1].bit_length() - 1

    # -- set algebra ---------------------------------------------------------------------------------
    def __or__(self, other: "BitSet") -> "BitSet":
        a, b = self._words, other._words
        if len(a) < len(b):
            a, b = b, a
        return BitSet._from_words([x | (b[i] if i < len(b) else 0) for i, x in enumerate(a)])

    def __and__(self, other: "BitSet") -> "BitSet":
        return BitSet._from_words([x & y for x, y in zip(self._words, other._words)])

    def __sub__(self, other: "BitSet") -> "BitSet":
        b = other._words
        return BitSet._from_words([x & ~(b[i] if i < len(b) else 0) & MASK for i, x in enumerate(self._words)])

    def __xor__(self, other: "BitSet") -> "BitSet":
        a, b = self._words, other._words
        if len(a) < len(b):
            a, b = b, a
        return BitSet._from_words([x ^ (b[i] if i < len(b) else 0) for i, x in enumerate(a)])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BitSet):
            return NotImplemented
        return self._words == other._words

    def issubset(self, other: "BitSet") -> bool:
        return not (self - other)

    def copy(self) -> "BitSet":
        return BitSet._from_words(list(self._words))

    # -- rank / select ----------------------------------------------------------------------------------
    def rank(self, i: int) -> int:
        """Number of members strictly less than ``i``."""
        if i <= 0:
            return 0
        w, b = divmod(i, WORD)
        full = sum(_popcount(x) for x in self._words[: min(w, len(self._words))])
        if w < len(self._words):
            full += _popcount(self._words[w] & ((1 << b) - 1))
        return full

    def select(self, k: int) -> int:
        """The member with exactly ``k`` smaller members (the k-th smallest, 0-based)."""
        if k < 0:
            raise IndexError(k)
        remaining = k
        for wi, word in enumerate(self._words):
            c = _popcount(word)
            if remaining < c:
                for _ in range(remaining):
                    word &= word - 1
                return wi * WORD + (word & -word).bit_length() - 1
            remaining -= c
        raise IndexError(f"select({k}) on a BitSet of {len(self)} members")

    def __repr__(self) -> str:
        return f"BitSet({list(self)})"
