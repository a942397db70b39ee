"""The farm on a Ray cluster: one worker actor per node, the run folder and the sinks on the driver.

    config = FarmConfig(env_id="envfarm/ToolCalc-v0", episodes=10_000, concurrency=256, backend="bwrap")
    farm = RayFarm(config, make_policy("oracle"), RayConfig(address="10.0.0.1:6379"), run_dir=Path("runs/a"),
                   sinks=[FileSink(Path("out.jsonl"))])
    async for traj in farm.run():     # as Farm.run(): each trajectory once it is in the driver's spool
        ...
    farm.summary().nodes              # per node: episodes, steps/s, lost

Shape: a :class:`Farm` whose episode slots play remotely. On setup the driver joins the cluster
(``ray_cluster.connect``), starts a :class:`FarmWorker` pinned to every node that has capacity (CPUs, or the
``--ray-resource`` amount), and splits ``concurrency`` across them by capacity. A free episode slot pulls the
next index from the farm's one queue through the farm's gate (backpressure, staleness, stop) and hands it to
the live worker with the largest free part of its share, so a faster node, whose episodes end sooner, plays
more; the episode runs on the node (its backend, its images, its pool) and its Trajectory JSON comes back as
the reply of that one call. The attempts at one task (``--attempts``) all go to the worker that got the
first of them, which prepares the task once and forks them (``groups.py``), unless that worker is lost.
Everything else is the one-machine farm's: the fsync'd spool, sink cursors, at-least-once delivery,
``--resume``, interrupted records, the summary.

Node loss: a call that fails because its actor or node died (``RayActorError``, a crashed worker, a lost
object) puts that index back at the head of the queue for the other workers and retires the worker; nothing
was recorded for it, so nothing is duplicated (and the driver records an index at most once regardless);
the concurrency is split again over the live workers. Free slots wait while other episodes are in flight,
in case those come back. When every worker is lost the run stops with :class:`ClusterUnavailable`;
``--resume RUN`` runs what is missing. A policy that is unavailable on a node stops the run as on one
machine.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from envfarm.errors import ClusterUnavailable, ConfigError, FarmError, RolloutError

from .episode import Episode
from .farm import GATE_POLL_S, Farm, FarmConfig
from .policies import Policy
from .ray_cluster import Cluster, NodeInfo, RayConfig, connect, split
from .ray_worker import FarmWorker, WorkerInfo, WorkerSpec
from .sinks import Sink
from .summary import Summary
from .trajectory import Trajectory

log = logging.getLogger(__name__)

STOP_WORKER_S = 10.0


class _WorkerLost(Exception):
    """The actor (or its node) is gone; the index goes back on the queue."""


@dataclass
class NodeStats:
    """One node's worker, as the driver sees it (``Summary.nodes``)."""

    node: NodeInfo
    slots: int
    """Episodes it may have in flight: its share of the concurrency (re-split when a node is lost)."""
    handle: Any = None
    info: WorkerInfo | None = None
    episodes: int = 0
    steps: int = 0
    requeued: int = 0
    """Episodes in flight on this node when it was lost, given to other workers."""
    resets: int = 0
    """Tasks prepared here for their attempts to fork from (reported by the worker when it stops)."""
    forks: int = 0
    """Attempts started here on a fork of their task's prepared env."""
    lost: str | None = None
    """Why the worker was retired (actor or node died), else None."""
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    inflight: set[int] = field(default_factory=set)

    def to_dict(self) -> dict[str, Any]:
        span = (self.ended or time.monotonic()) - self.started
        return {"node_id": self.node.node_id, "address": self.node.address, "hostname": self.node.hostname,
                "head": self.node.head, "capacity": self.node.capacity, "slots": self.slots,
                "episodes": self.episodes, "steps": self.steps,
                "episodes_per_s": round(self.episodes / span, 2) if span > 0 else 0.0,
                "steps_per_s": round(self.steps / span, 2) if span > 0 else 0.0,
                "requeued": self.requeued, "group_resets": self.resets, "forks": self.forks,
                "lost": self.lost}


class RayFarm(Farm):
    """See the module docstring. ``policy`` is pickled to every worker before anything starts it."""

    def __init__(self, config: FarmConfig, policy: Policy, ray: RayConfig, *, run_dir: Path | None = None,
                 resume: bool = False, sinks: Sequence[Sink] = (), summary_path: Path | None = None,
                 options: Mapping[str, Any] | None = None) -> None:
        super().__init__(config, policy, run_dir=run_dir, resume=resume, sinks=sinks,
                         summary_path=summary_path, options=options)
        self.ray = ray
        self.nodes: list[NodeStats] = []
        self._recorded: set[int] = set()
        self._cluster: Cluster | None = None
        self._owners: dict[int, NodeStats] = {}
        """The worker playing each grouped task's attempts (seed -> worker)."""
        self._unsent: Counter[int] = Counter()
        """Attempts per grouped task not yet handed to a worker."""

    # ------------------------------------------------------------------------------------------ setup

    async def _setup(self, stack: AsyncExitStack) -> None:
        await self._open_run(stack)
        if not self._pending:
            return
        self._recorded = set(range(self.spec.episodes)) - set(self._pending)
        if self._groups_on():
            self._unsent = Counter(self.spec.seed_of(i) for i in self._pending)
        self._cluster = await connect(self.ray)
        stack.push_async_callback(self._cluster.close)
        policy = self._pickled_policy()  # before the driver's copy starts (sessions do not pickle)
        nodes = await self._cluster.nodes()
        shares = split(self.config.concurrency, [n.capacity for n in nodes])
        self.nodes = [NodeStats(n, s) for n, s in zip(nodes, shares, strict=True) if s > 0]
        stack.push_async_callback(self._stop_workers)
        await self._start_workers(policy)
        stack.push_async_callback(self.policy.aclose)
        await self.policy.start()  # the driver's copy: its name and weight version (staleness gate)
        if self.config.max_staleness is not None:
            await self._refresh_learner_version()
        log.info("farm on %d Ray nodes: %s", len(self.nodes),
                 ", ".join(f"{s.node.name} ({s.slots} slots)" for s in self.nodes))

    def _pickled_policy(self) -> bytes:
        from ray import cloudpickle

        try:
            return bytes(cloudpickle.dumps(self.policy))  # type: ignore[no-untyped-call]
        except Exception as e:  # what pickling raises depends on the object
            raise ConfigError(f"the policy {self.policy.name} cannot be sent to Ray workers ({e}); use a "
                              "policy spec (oracle, random, openai:URL) or a picklable callable") from e

    async def _start_workers(self, policy: bytes) -> None:
        import ray
        from ray import cloudpickle
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        actor = ray.remote(FarmWorker)
        for s in self.nodes:
            s.handle = actor.options(
                num_cpus=0, max_restarts=0, max_concurrency=max(1000, 2 * s.slots),
                scheduling_strategy=NodeAffinitySchedulingStrategy(s.node.node_id, soft=False)).remote()
        spec = self.spec
        grouped = bool(self._unsent)
        starts = [s.handle.start.remote(WorkerSpec(spec, self.config, s.slots, grouped),
                                        cloudpickle.loads(policy)) for s in self.nodes]
        results = await asyncio.gather(*starts, return_exceptions=True)
        for s, result in zip(self.nodes, results, strict=True):
            if not isinstance(result, BaseException):
                s.info, s.started = result, time.monotonic()
            elif isinstance(getattr(result, "cause", None), FarmError):  # its backend, images, policy: fix it
                raise _start_error(s.node, result) from result
            else:  # the node died or left before its worker came up: go on without it
                s.lost, s.ended = f"did not start: {_first_line(result)}", time.monotonic()
                log.warning("no farm worker on node %s: %s", s.node.name, s.lost)
        self._check_workers()
        self._resplit()

    async def _stop_workers(self) -> None:
        import ray

        alive = [s for s in self.nodes if s.handle is not None and s.lost is None]
        if alive:
            stops = {asyncio.ensure_future(s.handle.stop.remote()): s for s in alive}
            done, _ = await asyncio.wait(stops, timeout=STOP_WORKER_S)
            for task in done:
                if not task.cancelled() and task.exception() is not None:
                    log.debug("stopping a farm worker: %s", task.exception())
                elif not task.cancelled():
                    counts = task.result() or {}
                    stops[task].resets, stops[task].forks = counts.get("resets", 0), counts.get("forks", 0)
        for s in self.nodes:
            if s.handle is not None:
                await asyncio.to_thread(ray.kill, s.handle, no_restart=True)
                s.handle = None
            if s.ended is None:
                s.ended = time.monotonic()

    # ------------------------------------------------------------------------------------------ slots

    async def _worker(self, out: asyncio.Queue[Trajectory | None]) -> None:
        while (index := await self._admit()) is not None:
            owner, group = self._owner(index)
            self._inflight[index] = Episode(self.spec.episode_id(index), self.spec.env_id, index,
                                            self.spec.seed_of(index), self.spec.attempt_of(index),
                                            self.policy.name)
            owner.inflight.add(index)
            self.live.begin()
            try:
                line = await self._play(owner, index, group)
            except _WorkerLost as e:
                self._requeue(owner, index, str(e))
                continue
            finally:
                self.live.end()
                owner.inflight.discard(index)
            del self._inflight[index]
            await self._accept(owner, Trajectory.from_json(line), out)

    async def _admit(self) -> int | None:
        """The farm's gate; with the queue empty, wait while episodes are in flight (a lost node's come
        back)."""
        while True:
            index = await super()._admit()
            if index is not None or self._stopping or not self._inflight:
                return index
            await asyncio.sleep(GATE_POLL_S)

    def _owner(self, index: int) -> tuple[NodeStats, int]:
        """The worker for episode ``index``: its task's worker when the task is grouped and that worker is
        alive, else the least loaded; and, when the task goes to that worker for the first time, how many of
        its attempts will (this one included; 0 otherwise)."""
        seed = self.spec.seed_of(index)
        if not self._unsent[seed]:
            return self._least_loaded(), 0
        left, self._unsent[seed] = self._unsent[seed], self._unsent[seed] - 1
        owner = self._owners.get(seed)
        if owner is not None and owner.lost is None:
            return owner, 0
        owner = self._owners[seed] = self._least_loaded()
        return owner, left

    def _least_loaded(self) -> NodeStats:
        """The live worker with the largest free part of its share. One exists: this slot is free, so fewer
        than ``concurrency`` (the sum of the live workers' shares) episodes are in flight."""
        alive = [s for s in self.nodes if s.lost is None]
        if not alive:
            self._check_workers()
        return max(alive, key=lambda s: ((s.slots - len(s.inflight)) / max(s.slots, 1), s.slots))

    async def _play(self, owner: NodeStats, index: int, group: int) -> str:
        import ray
        from ray import exceptions as rx

        ref = owner.handle.play.remote(index, group)
        try:
            line: str = await ref
            return line
        except asyncio.CancelledError:
            ray.cancel(ref)  # only sends the request: the episode's env closes on the node
            raise
        except rx.RayTaskError as e:  # play() raised on the node: PolicyUnavailable and the like
            cause = e.cause if isinstance(e.cause, BaseException) else e
            if isinstance(cause, FarmError):
                raise cause from None
            raise RolloutError(f"the farm worker on node {owner.node.name} failed: {e}") from e
        except (rx.RayActorError, rx.WorkerCrashedError, rx.NodeDiedError, rx.ObjectLostError) as e:
            raise _WorkerLost(_first_line(e)) from e

    def _requeue(self, owner: NodeStats, index: int, why: str) -> None:
        self._pending.appendleft(index)  # before it leaves _inflight: waiting slots see one or the other
        if self._groups_on():
            self._unsent[self.spec.seed_of(index)] += 1  # its task's next worker prepares it again
        del self._inflight[index]
        owner.requeued += 1
        if owner.lost is None:
            owner.lost, owner.ended = why, time.monotonic()
            log.warning("farm worker on node %s lost (%s); its episodes and slots go to the other nodes",
                        owner.node.name, why)
            self._resplit()
        log.info("episode %s requeued (node %s lost)", self.spec.episode_id(index), owner.node.name)
        self._check_workers()

    def _resplit(self) -> None:
        """Split the concurrency again over the live workers (after a node was lost)."""
        alive = [s for s in self.nodes if s.lost is None]
        for s, share in zip(alive, split(self.config.concurrency, [s.node.capacity for s in alive]),
                            strict=True):
            s.slots = share

    def _check_workers(self) -> None:
        if self.nodes and all(s.lost is not None for s in self.nodes):
            lost = "; ".join(f"{s.node.name}: {s.lost}" for s in self.nodes)
            where = self.run_dir.path if self.run_dir else "RUN"
            raise ClusterUnavailable(f"every farm worker was lost ({lost}); {len(self._pending)} episodes "
                                     "were not run: bring the nodes back, then `envfarm farm run --resume "
                                     f"{where}`")

    async def _accept(self, owner: NodeStats, traj: Trajectory,
                      out: asyncio.Queue[Trajectory | None]) -> None:
        if traj.index in self._recorded:  # cannot happen with one call per index; never record twice
            log.warning("episode %s arrived twice; the second copy is dropped", traj.episode_id)
            return
        self._recorded.add(traj.index)
        owner.episodes += 1
        owner.steps += traj.steps
        for _ in range(traj.steps):
            self.live.step()
        await self._record(traj, out)

    # ---------------------------------------------------------------------------------------- summary

    def _build_summary(self) -> Summary:
        base = super()._build_summary()
        return replace(base, nodes_used=sum(1 for s in self.nodes if s.episodes),
                       nodes={s.node.name: s.to_dict() for s in self.nodes})


def _start_error(node: NodeInfo, error: BaseException) -> FarmError:
    """A worker that could not start on its node (backend, images, policy), as one error naming the node."""
    return ClusterUnavailable(f"the farm worker on Ray node {node.name} ({node.hostname}) did not start: "
                              f"{getattr(error, 'cause', error)}")


def _first_line(e: BaseException) -> str:
    first = (str(e).splitlines() or [""])[0]
    return f"{type(e).__name__}: {first if len(first) <= 160 else first[:157] + '...'}"


__all__ = ["NodeStats", "RayConfig", "RayFarm"]
