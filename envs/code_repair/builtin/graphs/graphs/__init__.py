"""Directed graphs: traversal, topological sort with cycle detection, Dijkstra shortest paths."""

from .digraph import CycleError, DiGraph, NoPathError

__all__ = ["CycleError", "DiGraph", "NoPathError"]
