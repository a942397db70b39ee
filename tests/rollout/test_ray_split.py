"""Splitting the farm's concurrency over Ray nodes by capacity (no cluster needed)."""

from __future__ import annotations

import pytest

from envfarm.errors import ConfigError
from envfarm.rollout.ray_cluster import RayConfig, _node, _split, split


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


def test_bad_addresses() -> None:
    with pytest.raises(ConfigError, match="needs an address"):
        RayConfig(" ")


def test_nodes_by_cpu_or_custom_resource() -> None:
    raw = {"NodeID": "ab" * 28, "NodeManagerAddress": "10.0.0.2", "NodeManagerHostname": "w2",
           "Resources": {"CPU": 8.0, "envfarm": 32.0}}
    by_cpu, by_resource = _node(raw, None), _node(raw, "envfarm")
    assert by_cpu is not None and by_cpu.capacity == 8 and not by_cpu.head
    assert by_cpu.name == "10.0.0.2/ababab"
    assert by_resource is not None and by_resource.capacity == 32
    assert _node(raw, "gpu-farm") is None  # nodes without the resource get no worker


def test_address_forms() -> None:
    assert _split("10.0.0.1:6379") == ("10.0.0.1", 6379) and _split("[::1]:6379") == ("::1", 6379)
    with pytest.raises(ConfigError, match="HOST:PORT"):
        _split("10.0.0.1")
