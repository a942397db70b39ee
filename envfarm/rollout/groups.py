"""Groups from one state: the attempts at a task start from one prepared env, forked, not G resets.

    groups = Groups(make, Counter({7: 8}))     # seed 7: 8 attempts to play
    async with groups.start(7) as (env, obs, info):
        ...                                     # play the attempt on ``env`` (closed on the way out)

The first attempt of a task to start resets an env for its seed (the expensive part: a sandbox, a checkout,
CodeRepair's instance image and repository copy) and keeps it, untouched, as the group's prepared state. The
next task's env is prepared in the background meanwhile (``ahead``), so the resets overlap the attempts
instead of holding them up. Every attempt then plays on an ``afork()`` of it (copy-on-write sandbox, Python
state copied: the same state an independent ``areset(seed=...)`` gives), and the last attempt to start plays
on the prepared env itself: one reset and G-1 forks per task. An attempt closes its env when it ends;
:meth:`Groups.aclose` closes the prepared envs of attempts that never started (a stopped run).

Faults stay one attempt's: a reset or a fork that fails raises from :meth:`start` for that attempt alone
(an :class:`~envfarm.errors.InfraError`: the episode's retry plays it from a fresh reset, see
``episode.py``), and the next attempt to start prepares the task again. Families that cannot fork
(``forkable = False``) and tasks with one attempt left are not grouped: :meth:`grouped` says False and the
farm resets as before. The policy's sampling stays per attempt (its RNG is seeded by seed, attempt, retry).
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from envfarm.envs.core import AgentEnv

log = logging.getLogger(__name__)

Started = tuple[AgentEnv[Any], str, dict[str, Any]]
"""An attempt's env at its first state, the first observation and the reset's info."""


@dataclass
class _Task:
    """One task's prepared env and how many attempts have yet to start from it."""

    left: int
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    env: AgentEnv[Any] | None = None
    first: tuple[str, dict[str, Any]] = ("", {})
    ready: asyncio.Task[None] | None = None
    """The reset under way (or done) that prepares ``env``."""


class Groups:
    """The prepared tasks of a run (module docstring); ``make`` makes an env (the farm's ``make_env``).
    ``attempts`` maps each seed to its attempts to play, in the order they start; when one task starts, the
    next ``ahead`` are prepared in the background, so their resets overlap this one's attempts."""

    def __init__(self, make: Callable[[], AgentEnv[Any]], attempts: Mapping[int, int],
                 ahead: int = 1) -> None:
        self._make = make
        self._tasks = {seed: _Task(n) for seed, n in attempts.items() if n > 1}
        self._order = list(self._tasks)
        self._ahead = ahead
        self._preparing: set[asyncio.Task[None]] = set()
        self.resets = 0
        """Envs prepared (resets) so far."""
        self.forks = 0
        """Attempts started on a fork so far."""

    def add(self, seed: int, attempts: int) -> None:
        """``attempts`` more attempts at ``seed`` to play here: a Ray worker learns its tasks as they
        come."""
        if attempts < 2 and seed not in self._tasks:
            return
        if seed not in self._tasks:
            self._tasks[seed] = _Task(0)
            self._order.append(seed)
        self._tasks[seed].left += attempts

    def grouped(self, seed: int) -> bool:
        """Whether the next attempt at ``seed`` starts from the group's prepared state."""
        task = self._tasks.get(seed)
        return task is not None and task.left > 0

    @asynccontextmanager
    async def start(self, seed: int) -> AsyncIterator[Started]:
        """The env of the next attempt at ``seed`` at its first state; closed when the block ends."""
        env, obs, info = await self._take(seed)
        try:
            yield env, obs, info
        finally:
            await asyncio.shield(env.aclose())

    async def _take(self, seed: int) -> Started:
        task = self._tasks[seed]
        self._prepare_ahead(seed)
        async with task.lock:
            task.left -= 1  # taken, whatever happens below: a failed attempt retries from a fresh reset
            if task.env is None:
                ready = self._start_preparing(task, seed)
                try:
                    await asyncio.shield(ready)  # this attempt's timeout must not cancel the others' reset
                except BaseException:
                    if ready.done() and (ready.cancelled() or ready.exception() is not None):
                        # the reset failed: the next attempt prepares afresh
                        await self._drop(task, seed)
                    raise
            assert task.env is not None
            obs, info = task.first
            if task.left == 0:  # the last attempt plays on the prepared env itself
                env, task.env = task.env, None
                self._tasks.pop(seed, None)
                return env, obs, info
            try:
                twin = await task.env.afork()
            except BaseException as e:  # the prepared env may be what broke: the next attempt prepares afresh
                log.info("fork of seed %d's prepared env failed (%s); the next attempt prepares it again",
                         seed, e)
                await self._drop(task, seed)
                raise
            self.forks += 1
            return twin, obs, copy.deepcopy(info)

    def _prepare_ahead(self, seed: int) -> None:
        i = self._order.index(seed)
        for later in self._order[i + 1:i + 1 + self._ahead]:
            task = self._tasks.get(later)
            if task is not None and task.env is None:
                self._start_preparing(task, later)

    def _start_preparing(self, task: _Task, seed: int) -> asyncio.Task[None]:
        if task.ready is None:
            task.ready = asyncio.create_task(self._prepare(task, seed), name=f"prepare seed {seed}")
            self._preparing.add(task.ready)
            task.ready.add_done_callback(self._preparing.discard)
        return task.ready

    async def _prepare(self, task: _Task, seed: int) -> None:
        env = self._make()
        try:
            obs, info = await env.areset(seed=seed)
        except BaseException:
            await asyncio.shield(env.aclose())
            raise
        self.resets += 1
        task.env, task.first = env, (obs, info)

    async def _drop(self, task: _Task, seed: int) -> None:
        env, task.env, task.ready = task.env, None, None
        if env is not None:
            await asyncio.shield(env.aclose())
        if task.left == 0:
            self._tasks.pop(seed, None)

    async def aclose(self) -> None:
        """Stop the resets under way and close the prepared envs no attempt took (a run that stopped early).
        Idempotent."""
        preparing, self._preparing = list(self._preparing), set()
        for ready in preparing:
            ready.cancel()
        await asyncio.gather(*preparing, return_exceptions=True)
        tasks, self._tasks = self._tasks, {}
        for task in tasks.values():
            if task.env is not None:
                env, task.env = task.env, None
                await asyncio.shield(env.aclose())


__all__ = ["Groups", "Started"]
