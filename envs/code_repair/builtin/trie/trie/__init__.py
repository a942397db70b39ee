"""A prefix tree with insert, delete, prefix search and weighted autocomplete."""

from .trie import Trie

__all__ = ["Trie"]
