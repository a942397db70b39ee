"""A directed graph with weighted edges.

Nodes are any hashable values. Neighbour order is insertion order, so every traversal is deterministic.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from typing import Hashable, Iterable, Iterator

Node = Hashable

WHITE, GRAY, BLACK = 0, 1, 2


class CycleError(ValueError):
    """Raised by topological_sort when the graph has a cycle; ``cycle`` lists its nodes."""

    def __init__(self, cycle: list[Node]):
        super().__init__("graph has a cycle: " + " -> ".join(map(str, cycle)))
        self.cycle = cycle


class NoPathError(LookupError):
    """Raised when no path exists between two nodes."""


class DiGraph:
    def __init__(self, edges: Iterable[tuple] = ()):
        self._succ: dict[Node, dict[Node, float]] = {}
        for edge in edges:
            self.add_edge(*edge)

    # -- construction -------------------------------------------------------------------------------
    def add_node(self, node: Node) -> None:
        self._succ.setdefault(node, {})

    def add_edge(self, u: Node, v: Node, weight: float = 1) -> None:
        if weight < 0:
            raise ValueError(f"negative weight {weight} on edge {u!r}->{v!r}")
        self.add_node(u)
        self.add_node(v)
        self._succ[u][v] = weight

    def remove_edge(self, u: Node, v: Node) -> None:
        try:
            del self._succ[u][v]
        except KeyError:
            raise KeyError(f"no edge {u!r}->{v!r}") from None

    # -- queries --------------------------------------------------------------------------------------
    def __contains__(self, node: Node) -> bool:
        return node in self._succ

    def __len__(self) -> int:
        return len(self._succ)

    def nodes(self) -> list[Node]:
        return list(self._succ)

    def edges(self) -> list[tuple[Node, Node, float]]:
        return [(u, v, w) for u, nbrs in self._succ.items() for v, w in nbrs.items()]

    def successors(self, node: Node) -> list[Node]:
        return list(self._succ[node])

    def predecessors(self, node: Node) -> list[Node]:
        if node not in self._succ:
            raise KeyError(node)
        return [u for u, nbrs in self._succ.items() if node in nbrs]

    # -- traversal --------------------------------------------------------------------------------------
    def bfs(self, start: Node) -> list[Node]:
        if start not in self._succ:
            raise KeyError(start)
        seen = {start}
        order = []
        queue = deque([start])
        while queue:
            u = queue.popleft()
            order.append(u)
            for v in self._succ[u]:
                if v not in seen:
                    seen.add(v)
                    queue.append(v)
        return order

    def dfs(self, start: Node) -> list[Node]:
        """Pre-order depth-first traversal, visiting neighbours in insertion order."""
        if start not in self._succ:
            raise KeyError(start)
        seen: set[Node] = set()
        order = []
        stack = [start]
        while stack:
            u = stack.pop()
            if u in seen:
                continue
            seen.add(u)
            order.append(u)
            stack.extend(reversed(list(self._succ[u])))
        return order

    def reachable(self, start: Node, goal: Node) -> bool:
        return goal in self.bfs(start)

    # -- ordering -----------------------------------------------------------------------------------
    def topological_sort(self) -> list[Node]:
        """Return the nodes so that every edge goes forward; raise CycleError on a cycle."""
        color = {node: WHITE for node in self._succ}
        order: list[Node] = []
        for root in self._succ:
            if color[root] != WHITE:
                continue
            color[root] = GRAY
            path = [root]
            stack: list[tuple[Node, Iterator[Node]]] = [(root, iter(self._succ[root]))]
            while stack:
                u, it = stack[-1]
                for v in it:
                    if color[v] == GRAY:
                        raise CycleError(path[path.index(v):] + [v])
                    if color[v] == WHITE:
                        color[v] = GRAY
                        path.append(v)
                        stack.append((v, iter(self._succ[v])))
                        break
                else:
                    stack.pop()
                    path.pop()
                    color[u] = BLACK
                    order.append(u)
        order.reverse()
        return order

    def has_cycle(self) -> bool:
        try:
            self.topological_sort()
        except CycleError:
            return True
        return False

    # -- shortest paths ------------------------------------------------------------------------------
    def dijkstra(self, source: Node) -> tuple[dict[Node, float], dict[Node, Node]]:
        """Return (distances, predecessors) for every node reachable from ``source``."""
        if source not in self._succ:
            raise KeyError(source)
        dist: dict[Node, float] = {source: 0}
        prev: dict[Node, Node] = {}
        done: set[Node] = set()
        counter = itertools.count()
        heap = [(0, next(counter), source)]
        while heap:
            d, _, u = heapq.heappop(heap)
            if u in done:
                continue
            done.add(u)
            for v, w in self._succ[u].items():
                nd = d + w
                if v not in dist or nd < dist[v]:
                    dist[v] = nd
                    prev[v] = u
                    heapq.heappush(heap, (nd, next(counter), v))
        return dist, prev

    def shortest_path(self, source: Node, target: Node) -> tuple[float, list[Node]]:
        if target not in self._succ:
            raise KeyError(target)
        dist, prev = self.dijkstra(source)
        if target not in dist:
            raise NoPathError(f"no path from {source!r} to {target!r}")
        path = [target]
        while path[-1] != source:
            path.append(prev[path[-1]])
        path.reverse()
        return dist[target], path
