"""Splitting the farm's concurrency over Ray nodes by capacity (no cluster needed)."""

from __future__ import annotations

import pytest

from envfarm.errors import ConfigError
from envfarm.rollout.ray_cluster import RayConfig, interleave, split


@pytest.mark.parametrize(("total", "caps", "want"), [
    (16, [1, 1], [8, 8]),
    (10, [4, 1], [8, 2]),
    (7, [2, 1, 1], [3, 2, 2]),
    (3, [64, 1, 1], [1, 1, 1]),  # every node gets a slot while there are enough
    (2, [1, 8, 4], [0, 1, 1]),  # fewer slots than nodes: the largest nodes
    (5, [], []),
])
def test_split_by_capacity(total: int, caps: list[float], want: list[int]) -> None:
    got = split(total, caps)
    assert got == want and sum(got) == (total if caps else 0)


def test_interleave_spreads_every_prefix() -> None:
    order = interleave([4, 2])
    assert sorted(order) == [0, 0, 0, 0, 1, 1] and order[:2] in ([0, 1], [1, 0])
    assert interleave([1, 1, 1]) == [0, 1, 2] and interleave([]) == []


def test_bad_addresses() -> None:
    with pytest.raises(ConfigError, match="needs an address"):
        RayConfig(" ")
