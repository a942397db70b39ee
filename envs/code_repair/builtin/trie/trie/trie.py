"""Trie implementation. Each stored word carries a weight (e.g. a frequency) used to rank completions."""

from __future__ import annotations

from typing import Iterable, Iterator


class _Node:
    __slots__ = ("children", "terminal", "weight")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.terminal = False
        self.weight = 0


class Trie:
    def __init__(self, words: Iterable[str] = ()):
        self._root = _Node()
        self._size = 0
        for w in words:
            self.insert(w)

    # -- mutation ----------------------------------------------------------------------------------
    def insert(self, word: str, weight: int = 1) -> None:
        """Add ``word``; inserting an existing word adds ``weight`` to its weight."""
        if not isinstance(word, str):
            raise TypeError("words must be str")
        if weight < 0:
            raise ValueError("weight must be non-negative")
        node = self._root
        for ch in word:
            node = node.children.setdefault(ch, _Node())
        if not node.terminal:
            node.terminal = True
            self._size += 1
        node.weight += weight

    def delete(self, word: str) -> bool:
        """Remove ``word``; return False if it was not present. Unused nodes are pruned."""
        path = [self._root]
        for ch in word:
            nxt = path[-1].children.get(ch)
            if nxt is None:
                return False
            path.append(nxt)
        node = path[-1]
        if not node.terminal:
            return False
        node.terminal = False
        node.weight = 0
        self._size -= 1
        for i in range(len(word), 0, -1):
            child = path[i]
            if child.terminal or child.children:
                break
            del path[i - 1].children[word[i - 1]]
        return True

    # -- queries -------------------------------------------------------------------------------------
    def _find(self, prefix: str) -> _Node | None:
        node = self._root
        for ch in prefix:
            node = node.children.get(ch)
            if node is None:
                return None
        return node

    def __contains__(self, word: str) -> bool:
        node = self._find(word)
        return node is not None and node.terminal

    def __len__(self) -> int:
        return self._size

    def weight(self, word: str) -> int:
        node = self._find(word)
        if node is None or not node.terminal:
            raise KeyError(word)
        return node.weight

    def has_prefix(self, prefix: str) -> bool:
        node = self._find(prefix)
        return node is not None and (node.terminal or bool(node.children))

    def _walk(self, node: _Node, prefix: str) -> Iterator[tuple[str, int]]:
        stack = [(node, prefix)]
        while stack:
            n, p = stack.pop()
            if n.terminal:
                yield p, n.weight
            for ch in sorted(n.children, reverse=True):
                stack.append((n.children[ch], p + ch))

    def starts_with(self, prefix: str) -> list[str]:
        """All stored words beginning with ``prefix``, in lexicographic order."""
        node = self._find(prefix)
        if node is None:
            return []
        return [w for w, _ in self._walk(node, prefix)]

    def __iter__(self) -> Iterator[str]:
        return (w for w, _ in self._walk(self._root, ""))

    def complete(self, prefix: str, limit: int = 5) -> list[str]:
        """The ``limit`` best completions of ``prefix``: highest weight first, ties alphabetical."""
        node = self._find(prefix)
        if node is None or limit <= 0:
            return []
        ranked = sorted(self._walk(node, prefix), key=lambda item: (-item[1], item[0]))
        return [w for w, _ in ranked[:limit]]

    def longest_prefix_of(self, text: str) -> str | None:
        """The longest stored word that is a prefix of ``text`` (None if there is none)."""
        node, best = self._root, None
        if node.terminal:
            best = ""
        for i, ch in enumerate(text):
            node = node.children.get(ch)
            if node is None:
                break
            if node.terminal:
                best = text[: i + 1]
        return best
