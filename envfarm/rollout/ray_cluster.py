"""Reaching a Ray cluster for the farm: connect, find the nodes that take a worker, split the concurrency.

    cluster = await connect(RayConfig(address="10.0.0.1:6379"))   # ClusterUnavailable names the fix
    nodes = await cluster.nodes()                                  # alive nodes with capacity, by id
    shares = split(config.concurrency, [n.capacity for n in nodes])
    ...
    await cluster.close()                                          # ray.shutdown() if we connected

Ray is imported here and in ``ray_farm.py`` only, lazily: a plain install without the ``ray`` extra runs the
one-machine farm and gets a clear :class:`ClusterUnavailable` for ``--ray``.

A node's capacity is its ``CPU`` count, or with ``resource`` its amount of that custom resource (nodes without
it get no worker): ``ray start --resources '{"envfarm": 8}'`` gives a node 8 units of the farm's concurrency.

Loopback: Ray rewrites ``127.0.0.1``/``localhost`` in an address to the machine's outgoing address before it
connects, which on a cluster bound to loopback (all nodes on one machine, nothing exposed) points at nothing.
For a loopback address :func:`connect` makes the driver keep it (see :func:`_keep_loopback`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from envfarm.errors import ClusterUnavailable, ConfigError

log = logging.getLogger(__name__)

CONNECT_PROBE_S = 5.0
RAY_MISSING = "ray is not installed; run `make setup` (or `pip install 'envfarm[ray]'`)"
START_HINT = ("start one: `ray start --head --port=6379` on the head, `ray start --address=HEAD:6379` on "
              "each worker node (README, 'Farm on a Ray cluster'), or fix --ray")


@dataclass(frozen=True)
class RayConfig:
    """Where the farm's workers run."""

    address: str
    """Ray cluster address (``HOST:PORT`` of the head's GCS, or ``auto`` for the one ``ray start`` left on
    this machine). The driver (this process) must run on a node of the cluster, usually the head."""
    resource: str | None = None
    """Custom resource that marks farm nodes and sizes their share; None: every node, sized by its CPUs."""
    namespace: str = "envfarm"
    """Ray namespace of the driver and its actors."""

    def __post_init__(self) -> None:
        if not self.address.strip():
            raise ConfigError("--ray needs an address: HOST:PORT of the head node, or auto")


@dataclass(frozen=True)
class NodeInfo:
    """One alive Ray node that takes a farm worker."""

    node_id: str
    address: str
    """The node's IP address as Ray knows it."""
    hostname: str
    capacity: float
    """CPUs, or the amount of ``RayConfig.resource``."""
    head: bool = False

    @property
    def name(self) -> str:
        """Readable and unique even when several nodes share one machine: ``10.0.0.2/3f9a1c``."""
        return f"{self.address}/{self.node_id[:6]}"


class Cluster:
    """A connection to a Ray cluster (see the module docstring)."""

    def __init__(self, config: RayConfig, owned: bool) -> None:
        self.config = config
        self.owned = owned
        """True when :func:`connect` called ``ray.init`` (so :meth:`close` calls ``ray.shutdown``)."""

    async def nodes(self) -> list[NodeInfo]:
        """Alive nodes that take a worker; ClusterUnavailable when none does."""
        import ray

        raw: list[dict[str, Any]] = await asyncio.to_thread(ray.nodes)
        nodes = [n for n in (_node(r, self.config.resource) for r in raw if r.get("Alive")) if n is not None]
        if not nodes:
            what = f"the resource {self.config.resource!r}" if self.config.resource else "any CPU"
            raise ClusterUnavailable(f"no alive node of the Ray cluster at {self.config.address} has {what}; "
                                     "start the worker nodes with `ray start --address=HEAD:PORT"
                                     + (f" --resources '{{\"{self.config.resource}\": N}}'`"
                                        if self.config.resource else "`"))
        return sorted(nodes, key=lambda n: (not n.head, n.node_id))

    async def close(self) -> None:
        if self.owned:
            import ray

            self.owned = False
            await asyncio.to_thread(ray.shutdown)


def _node(raw: dict[str, Any], resource: str | None) -> NodeInfo | None:
    resources = raw.get("Resources") or {}
    capacity = float(resources.get(resource or "CPU", 0.0))
    if capacity <= 0:
        return None
    return NodeInfo(node_id=str(raw["NodeID"]), address=str(raw.get("NodeManagerAddress", "?")),
                    hostname=str(raw.get("NodeManagerHostname", "?")), capacity=capacity,
                    head="node:__internal_head__" in resources)


async def connect(config: RayConfig) -> Cluster:
    """Connect this process to the cluster as its driver; ClusterUnavailable (naming the fix) otherwise."""
    try:
        import ray
    except ImportError as e:
        raise ClusterUnavailable(RAY_MISSING) from e
    if ray.is_initialized():  # the caller connected already (a library user): use that connection
        return Cluster(config, owned=False)
    address = config.address.strip()
    if address != "auto":
        host, port = _split(address)
        await _probe(host, port)
        if _is_loopback(host):
            _keep_loopback()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    logging.getLogger("ray._private.worker").addFilter(_no_sigterm_note)
    try:
        await asyncio.to_thread(ray.init, address=address, namespace=config.namespace, log_to_driver=False,
                                logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as e:
        raise ClusterUnavailable(f"cannot join the Ray cluster at {address}: {e}; {START_HINT}") from e
    return Cluster(config, owned=True)


def _no_sigterm_note(record: logging.LogRecord) -> bool:
    """Ray notes that it set no SIGTERM handler when ``ray.init`` runs off the main thread (we call it in a
    worker thread); that is what we want: the farm's own handler drains the run."""
    return "SIGTERM handler is not set" not in record.getMessage()


def split(total: int, capacities: Sequence[float]) -> list[int]:
    """``total`` slots split in proportion to ``capacities`` (largest remainder), each share >= 1 while
    ``total`` allows; with fewer slots than nodes the largest nodes get one each."""
    n = len(capacities)
    if n == 0:
        return []
    order = sorted(range(n), key=lambda i: -capacities[i])
    if total <= n:
        return [1 if i in order[:total] else 0 for i in range(n)]
    weight = sum(capacities)
    exact = [total * c / weight for c in capacities]
    shares = [int(x) for x in exact]
    for i in sorted(range(n), key=lambda i: shares[i] - exact[i])[: total - sum(shares)]:
        shares[i] += 1
    for i in range(n):  # a node too small for a slot of its own still gets one, from the largest share
        if shares[i] == 0:
            shares[max(range(n), key=lambda j: shares[j])] -= 1
            shares[i] = 1
    return shares


def _split(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"--ray {address!r} is no HOST:PORT address (e.g. 10.0.0.1:6379), or auto")
    return host.strip("[]"), int(port)


async def _probe(host: str, port: int) -> None:
    """Fail in seconds, not after Ray's minutes of retries, when nothing listens at the address."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), CONNECT_PROBE_S)
    except (OSError, TimeoutError) as e:
        why = "timed out" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        raise ClusterUnavailable(f"no Ray cluster answers at {host}:{port} ({why}); {START_HINT}") from e
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:
        pass


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _keep_loopback() -> None:
    """Stop Ray from rewriting a loopback address to this machine's outgoing address (see the module
    docstring). Ray does it only when multi-node clusters are enabled (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER``,
    read once at import); a driver never starts nodes, so turning it off in the driver changes nothing
    else."""
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False


__all__ = ["Cluster", "NodeInfo", "RayConfig", "connect", "split"]
