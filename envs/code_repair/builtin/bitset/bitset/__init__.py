"""A growable bitset of non-negative integers stored in 64-bit words, with set algebra and rank/select."""

from .bitset import BitSet

__all__ = ["BitSet"]
