"""The farm worker: a Ray actor, one per node, that plays the episodes the driver hands it on its own node.

    worker = ray.remote(FarmWorker).options(scheduling_strategy=NodeAffinitySchedulingStrategy(id, False))
    handle = worker.remote()
    node = await handle.start.remote(WorkerSpec(...), policy)   # backend check, policy, warm pool
    line = await handle.play.remote(17)                         # Trajectory JSON of episode index 17
    line = await handle.play.remote(24, 8)                      # the first of 8 attempts at its task here
    await handle.stop.remote()                                  # {"resets": ..., "forks": ...}

It runs the one-machine farm's own episode code (``episode.play``: retries, infra errors, timeouts) with the
node's sandbox backend, images and warm :class:`SandboxPool`, env instances reused episode after episode like
the farm's slots. The attempts at one task go to one worker (the driver sends them there), which prepares
the task once and forks them from it (``groups.py``); the driver says how many with the first. It keeps no
record: the driver owns the run folder, the spool and the sinks, so a worker that dies loses nothing the
driver has acknowledged. This module does not import ray (the driver wraps the class with ``ray.remote``),
so it loads, and is tested, without the extra.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from dataclasses import dataclass
from typing import Any

from envfarm.envs.core import AgentEnv
from envfarm.sandbox import Backend, get_backend
from envfarm.sandbox.pool import Pools

from .environments import make_env, start_pools
from .episode import Episode, play
from .farm import FarmConfig
from .groups import Groups
from .policies import Policy
from .runs import RunSpec
from .summary import Live

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerSpec:
    """What one node's worker runs: the run, the farm's settings, and this node's share of the slots."""

    run: RunSpec
    config: FarmConfig
    slots: int
    """Episodes this worker has in flight at most (its share of the farm's concurrency)."""
    grouped: bool = False
    """Whether the attempts at a task start from one prepared env (``Farm._groups_on``)."""


@dataclass(frozen=True)
class WorkerInfo:
    """What a started worker reports about itself."""

    node_id: str
    hostname: str
    pid: int
    slots: int


class FarmWorker:
    """See the module docstring. Methods are async: Ray runs the actor's calls on one asyncio loop."""

    def __init__(self) -> None:
        self.live = Live()
        self._spec: WorkerSpec | None = None
        self._policy: Policy | None = None
        self._backend: Backend | None = None
        self._pools: Pools | None = None
        self._envs: list[Any] = []
        self._step_slots: asyncio.Semaphore | None = None
        self._groups: Groups | None = None

    async def start(self, spec: WorkerSpec, policy: Policy) -> WorkerInfo:
        """Check the backend, start the policy, warm the pool and lease once (a missing image fails here)."""
        self._spec, self._policy, cfg = spec, policy, spec.config
        self._backend = get_backend(cfg.backend)
        await policy.start()
        size = cfg.pool_size if cfg.pool_size is not None else min(spec.slots, 32)
        max_live = cfg.max_live if cfg.max_live is not None else spec.slots + size + max(8, spec.slots // 4)
        self._pools, _ = await start_pools(spec.run.env_id, spec.run.env_kwargs, self._backend, warm=size,
                                           max_live=max_live, prefill=cfg.prefill)
        self._step_slots = asyncio.Semaphore(cfg.step_slots) if cfg.step_slots else None
        if spec.grouped:
            self._groups = Groups(self._make_env, {})
        import ray  # present: this runs inside a Ray worker

        node_id = ray.get_runtime_context().get_node_id()
        log.info("farm worker on node %s (%s) ready: %d slots", node_id, socket.gethostname(), spec.slots)
        return WorkerInfo(node_id=node_id, hostname=socket.gethostname(), pid=os.getpid(), slots=spec.slots)

    def _make_env(self) -> AgentEnv[Any]:
        assert self._spec is not None and self._pools is not None, "not started"
        run = self._spec.run
        return make_env(run.env_id, self._spec.config.backend, self._pools, run.env_kwargs)

    async def play(self, index: int, group: int = 0) -> str:
        """Play episode ``index`` of the run; its Trajectory as JSON (the driver records it). ``group``: with
        the first attempt at a task sent here, how many attempts at it (this one included) will come."""
        assert self._spec is not None and self._policy is not None and self._pools is not None, "not started"
        run, cfg = self._spec.run, self._spec.config
        env = self._envs.pop() if self._envs else self._make_env()
        ep = Episode(run.episode_id(index), run.env_id, index, run.seed_of(index), run.attempt_of(index),
                     self._policy.name)
        if self._groups is not None and group:
            self._groups.add(ep.seed, group)
        try:
            traj = await play(env, self._policy, ep, self.live, max_retries=cfg.max_retries,
                              timeout_s=cfg.episode_timeout_s, step_slots=self._step_slots,
                              groups=self._groups)
        except BaseException:  # cancelled by the driver, or the policy is gone: this env is not reused
            await asyncio.shield(env.aclose())
            raise
        if traj.status == "error":  # the env may be broken: the next episode gets a new one
            await env.aclose()
        else:
            self._envs.append(env)
        return traj.to_json()

    async def stop(self) -> dict[str, int]:
        """Close the prepared tasks, the envs, the pool, the backend and the policy; how many tasks were
        prepared (``resets``) and attempts forked (``forks``) here. Idempotent."""
        counts = {"resets": 0, "forks": 0}
        if self._groups is not None:
            groups, self._groups = self._groups, None
            counts = {"resets": groups.resets, "forks": groups.forks}
            await groups.aclose()  # before the pools close
        envs, self._envs = self._envs, []
        for env in envs:
            await env.aclose()
        if self._pools is not None:
            pools, self._pools = self._pools, None
            await pools.aclose()
        if self._backend is not None:
            backend, self._backend = self._backend, None
            await backend.aclose()
        if self._policy is not None:
            await self._policy.aclose()
        return counts


__all__ = ["FarmWorker", "WorkerInfo", "WorkerSpec"]
