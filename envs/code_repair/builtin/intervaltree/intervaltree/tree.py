from __future__ import annotations

from typing import Any, Iterator, NamedTuple, Optional


class Interval(NamedTuple):
    start: float
    end: float
    data: Any = None

    def overlaps(self, start: float, end: float) -> bool:
        """True when [self.start, self.end) and [start, end) share at least one point."""
        return self.start < end and start < self.end

    def contains_point(self, point: float) -> bool:
        return self.start <= point < self.end

    @property
    def length(self) -> float:
        return self.end - self.start


class _Node:
    __slots__ = ("interval", "left", "right", "max_end")

    def __init__(self, interval: Interval):
        self.interval = interval
        self.left: Optional[_Node] = None
        self.right: Optional[_Node] = None
        self.max_end = interval.end


def _key(iv: Interval):
    return (iv.start, iv.end, repr(iv.data))


class IntervalTree:
    """A binary search tree ordered by interval start, augmented with the maximum end of each subtree."""

    def __init__(self, intervals=()):
        self._root: Optional[_Node] = None
        self._size = 0
        for iv in intervals:
            self.add(*iv)

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def __iter__(self) -> Iterator[Interval]:
        stack, node = [], self._root
        while stack or node is not None:
            while node is not None:
                stack.append(node)
                node = node.left
            node = stack.pop()
            yield node.interval
            node = node.right

    def __contains__(self, item) -> bool:
        iv = Interval(*item)
        return any(x == iv for x in self.overlap(iv.start, iv.end)) if iv.start < iv.end else False

    def add(self, start: float, end: float, data: Any = None) -> Interval:
        if not start < end:
            raise ValueError(f"empty or inverted interval [{start}, {end})")
        iv = Interval(start, end, data)
        new = _Node(iv)
        if self._root is None:
            self._root = new
        else:
            node = self._root
            while True:
                if end > node.max_end:
                    node.max_end = end
                if _key(iv) < _key(node.interval):
                    if node.left is None:
                        node.left = new
                        break
                    node = node.left
                else:
                    if node.right is None:
                        node.right = new
                        break
                    node = node.right
        self._size += 1
        return iv

    def remove(self, start: float, end: float, data: Any = None) -> None:
        """Remove one interval equal to (start, end, data); KeyError if absent."""
        target = Interval(start, end, data)
        self._root, removed = self._remove(self._root, target)
        if not removed:
            raise KeyError(target)
        self._size -= 1

    def discard(self, start: float, end: float, data: Any = None) -> bool:
        try:
            self.remove(start, end, data)
        except KeyError:
            return False
        return True

    def _remove(self, node: Optional[_Node], target: Interval):
        if node is None:
            return None, False
        if node.interval == target:
            if node.left is None:
                return node.right, True
            if node.right is None:
                return node.left, True
            # two children: replace with the in-order successor
            succ = node.right
            while succ.left is not None:
                succ = succ.left
            node.interval = succ.interval
            node.right, _ = self._remove(node.right, succ.interval)
            removed = True
        elif _key(target) < _key(node.interval):
            node.left, removed = self._remove(node.left, target)
        else:
            node.right, removed = self._remove(node.right, target)
        if removed:
            self._update(node)
        return node, removed

    @staticmethod
    def _update(node: _Node) -> None:
        m = node.interval.end
        if node.left is not None and node.left.max_end > m:
            m = node.left.max_end
        if node.right is not None and node.right.max_end > m:
            m = node.right.max_end
        node.max_end = m

    def overlap(self, start: float, end: float) -> list[Interval]:
        """All intervals sharing a point with [start, end), sorted by (start, end)."""
        out: list[Interval] = []
        stack = [self._root] if self._root is not None else []
        while stack:
            node = stack.pop()
            if node.max_end <= start:
                continue  # nothing in this subtree reaches the query
            if node.left is not None:
                stack.append(node.left)
            if node.interval.overlaps(start, end):
                out.append(node.interval)
            if node.right is not None and node.interval.start < end:
                stack.append(node.right)
        out.sort(key=_key)
        return out

    def at(self, point: float) -> list[Interval]:
        """All intervals containing *point*."""
        return [iv for iv in self.overlap(point, point + 1) if iv.contains_point(point)]

    def envelop(self, start: float, end: float) -> list[Interval]:
        """All intervals lying completely inside [start, end)."""
        return [iv for iv in self.overlap(start, end) if start <= iv.start and iv.end <= end]

    def span(self) -> Optional[tuple[float, float]]:
        if self._root is None:
            return None
        node = self._root
        while node.left is not None:
            node = node.left
        return (node.interval.start, self._root.max_end)

    def merged(self) -> list[tuple[float, float]]:
        """The union of all intervals as a sorted list of disjoint (start, end) pairs; touching ones merge."""
        out: list[list[float]] = []
        for iv in self:
            if out and iv.start <= out[-1][1]:
                out[-1][1] = max(out[-1][1], iv.end)
            else:
                out.append([iv.start, iv.end])
        return [tuple(p) for p in out]
