"""Warm pools of sandboxes: started ahead of time, leased once, destroyed after use.

    async with SandboxPool(get_backend("docker"), limits=Limits(memory_mb=512), size=8, max_live=32) as pool:
        async with pool.lease(deadline_s=600) as sb:      # an idle sandbox, or a fresh one
            await sb.exec("pytest -q")
            async with pool.fork(sb, 4) as children:      # four copies of sb, leased like sb
                ...
        pool.stats()                                      # PoolStats(idle=..., leased=..., ...)

A background refill task keeps ``size`` started sandboxes idle. ``lease()`` pops one (no I/O on that path)
or waits for the refill to start one. A leased sandbox is never reused: on release it is closed in the
background and the pool starts a replacement. ``max_live`` caps the sandboxes that exist at once
(starting + idle + leased + still closing) with a semaphore, so ``lease()`` waits while the cap is reached.
A lease that outlives its deadline is reclaimed: the sandbox is killed and the holder's command in flight,
and every later call, raise :class:`LeaseExpired`. Start failures are retried with exponential backoff;
after ``max_failures`` in a row, waiting and new leases raise :class:`SandboxStartError`.

:class:`Pools` is a registry holding one pool per (backend name, image, limits).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Coroutine, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from envfarm.errors import ConfigError, LeaseExpired, SandboxStartError

from .base import Backend, Limits, Sandbox

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PoolStats:
    """A snapshot of one pool's counters."""

    idle: int
    """Started sandboxes waiting in the pool."""
    leased: int
    """Sandboxes handed out and not yet released."""
    starting: int
    """Starts in progress."""
    live: int
    """Admission slots in use: starting + idle + leased + released ones whose close has not finished."""
    started_total: int
    failed_total: int
    """Starts that raised."""
    leases_total: int
    expired_total: int
    """Leases reclaimed because their deadline passed."""


class SandboxPool:
    """Keeps ``size`` started sandboxes of one (backend, image, limits) ready to lease.

    ``max_live`` bounds all sandboxes of this pool at once (None: unbounded); ``lease_s`` is the default
    lease deadline in seconds (None: none); ``max_starting`` bounds concurrent starts; ``max_failures``
    consecutive start failures make ``lease()`` raise instead of wait; ``backoff_s`` is the first retry
    delay after a failure, doubled per failure up to ``backoff_max_s``.
    """

    def __init__(
        self,
        backend: Backend,
        image: str | None = None,
        limits: Limits | None = None,
        size: int = 8,
        max_live: int | None = None,
        lease_s: float | None = None,
        labels: Mapping[str, str] | None = None,
        *,
        max_starting: int = 8,
        max_failures: int = 3,
        backoff_s: float = 0.5,
        backoff_max_s: float = 30.0,
    ) -> None:
        _check_config(size, max_live, lease_s, max_starting, max_failures, backoff_s)
        self.backend = backend
        self.image = image
        self.limits = limits or Limits()
        self.size = size
        self.max_live = max_live
        self.lease_s = lease_s
        self.labels = dict(labels or {})
        self.max_starting = max_starting
        self.max_failures = max_failures
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self._idle: deque[Sandbox] = deque()
        self._leased: dict[str, Sandbox] = {}
        self._mine: dict[str, Sandbox] = {}  # every sandbox holding a slot: idle, leased or closing
        self._waiters: deque[asyncio.Future[Sandbox]] = deque()
        self._starting = 0
        self._live_slots = asyncio.Semaphore(max_live) if max_live is not None else None
        self._start_slots = asyncio.Semaphore(max_starting)
        self._wake = asyncio.Event()  # the refill loop re-checks demand
        self._changed = asyncio.Event()  # wait_filled() re-checks
        self._failures = 0
        self._last_error: BaseException | None = None
        self._retry_at = 0.0
        self._counts = {"started": 0, "failed": 0, "leases": 0, "expired": 0}
        self._runner: asyncio.Task[None] | None = None
        self._tg: asyncio.TaskGroup | None = None
        self._closed = False
        self._close_task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"<SandboxPool {self.backend.name}:{self.image or 'base'} size={self.size}>"

    # -------------------------------------------------------------------------------------------- public

    async def start(self, wait: bool = False) -> None:
        """Start the refill task (idempotent). With ``wait``, return once ``size`` sandboxes are idle."""
        if self._closed:
            raise SandboxStartError(f"{self} is closed")
        if self._runner is None:
            ready = asyncio.Event()
            self._runner = asyncio.create_task(self._run(ready), name=f"{self!r} refill")
            await ready.wait()
        if wait:
            await self.wait_filled()

    async def wait_filled(self) -> None:
        """Wait until ``size`` sandboxes are idle; raise SandboxStartError when starts keep failing."""
        while len(self._idle) < self.size:
            if self._broken():
                raise self._start_error()
            if self._closed:
                raise SandboxStartError(f"{self} is closed")
            self._changed.clear()
            await self._changed.wait()

    @asynccontextmanager
    async def lease(self, deadline_s: float | None = None) -> AsyncIterator[Sandbox]:
        """``async with pool.lease() as sb:`` — a fresh sandbox, destroyed (in the background) on exit.

        ``deadline_s`` (default: the pool's ``lease_s``) bounds the lease; past it the sandbox is killed
        and its calls raise LeaseExpired."""
        sb = await self._acquire()
        self._leased[sb.id] = sb
        self._counts["leases"] += 1
        deadline = self.lease_s if deadline_s is None else deadline_s
        timer = None
        if deadline is not None:
            timer = asyncio.get_running_loop().call_later(deadline, self._expire, sb, deadline)
        try:
            yield sb
        finally:
            if timer is not None:
                timer.cancel()
            self._release(sb)

    @asynccontextmanager
    async def fork(self, sb: Sandbox, n: int,
                   deadline_s: float | None = None) -> AsyncIterator[list[Sandbox]]:
        """``async with pool.fork(sb, 4) as children:`` — ``n`` forks of ``sb`` (see ``Sandbox.fork``), leased
        like ``lease()``: they hold ``max_live`` slots, expire at the deadline and are destroyed on exit."""
        if n < 1:
            raise ConfigError(f"pool.fork needs n >= 1, got {n}")
        if self._runner is None:
            await self.start()
        deadline = self.lease_s if deadline_s is None else deadline_s
        children: list[Sandbox] = []
        timers: list[asyncio.TimerHandle] = []
        try:
            for _ in range(n):
                if self._closed:
                    raise SandboxStartError(f"{self} is closed")
                children.append(await self._fork_one(sb))
                if deadline is not None:
                    timers.append(asyncio.get_running_loop().call_later(deadline, self._expire, children[-1],
                                                                        deadline))
            yield children
        finally:
            for timer in timers:
                timer.cancel()
            for child in children:
                self._release(child)

    async def _fork_one(self, sb: Sandbox) -> Sandbox:
        if self._live_slots is not None:
            await self._live_slots.acquire()
        try:
            child = await sb.fork()
        except BaseException:
            if self._live_slots is not None:
                self._live_slots.release()
            raise
        self._mine[child.id] = self._leased[child.id] = child
        self._counts["leases"] += 1
        return child

    def stats(self) -> PoolStats:
        slots = len(self._mine) + self._starting
        return PoolStats(
            idle=len(self._idle),
            leased=len(self._leased),
            starting=self._starting,
            live=slots,
            started_total=self._counts["started"],
            failed_total=self._counts["failed"],
            leases_total=self._counts["leases"],
            expired_total=self._counts["expired"],
        )

    async def aclose(self) -> None:
        """Stop refilling and close every sandbox of this pool. Idempotent; completes even if cancelled."""
        if self._close_task is None:
            self._close_task = asyncio.ensure_future(self._shutdown())
        await asyncio.shield(self._close_task)

    async def __aenter__(self) -> SandboxPool:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ----------------------------------------------------------------------------------------- acquiring

    async def _acquire(self) -> Sandbox:
        if self._runner is None:
            await self.start()
        if self._closed or self._runner is None or self._runner.done():
            raise SandboxStartError(f"{self} is closed")
        while self._idle:
            sb = self._idle.popleft()
            self._wake.set()
            if sb.alive:
                return sb
            log.info("%s: discarding dead idle %s", self, sb)
            self._spawn(self._dispose(sb))
        if self._broken() and time.monotonic() < self._retry_at:
            raise self._start_error()
        fut: asyncio.Future[Sandbox] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        self._wake.set()
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self._idle.appendleft(fut.result())  # handed over as we were cancelled: unused, keep it
            raise
        finally:
            if fut in self._waiters:
                self._waiters.remove(fut)

    def _deliver(self, sb: Sandbox) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(sb)
                return
        self._idle.append(sb)
        self._changed.set()

    def _broken(self) -> bool:
        return self._failures >= self.max_failures

    def _start_error(self) -> SandboxStartError:
        err = SandboxStartError(
            f"{self}: {self._failures} sandbox starts in a row failed; last error: {self._last_error}")
        err.__cause__ = self._last_error
        err.__suppress_context__ = True
        return err

    def _fail_waiters(self, make: Any) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_exception(make())
        self._changed.set()

    # ---------------------------------------------------------------------------------------- releasing

    def _release(self, sb: Sandbox) -> None:
        """Synchronous, so it also runs in a cancelled holder: the close happens in the background."""
        self._leased.pop(sb.id, None)
        self._spawn(self._dispose(sb))

    def _expire(self, sb: Sandbox, deadline: float) -> None:
        if sb.id not in self._leased or not sb.alive:
            return
        self._counts["expired"] += 1
        log.warning("%s: lease of %s expired after %gs; killing it", self, sb, deadline)
        self._spawn(self._dispose(sb, f"lease expired after {deadline:g}s"))

    async def _dispose(self, sb: Sandbox, kill_reason: str | None = None) -> None:
        try:
            if kill_reason is None:
                await sb.close()
            else:
                await sb.kill(kill_reason, LeaseExpired)
        except Exception as e:  # a failed destroy must not take the pool down; the backend logs details
            log.warning("%s: closing %s failed: %s", self, sb, e)
        finally:
            self._forget(sb)

    def _forget(self, sb: Sandbox) -> None:
        """Give back ``sb``'s admission slot (once)."""
        if self._mine.pop(sb.id, None) is None:
            return
        self._leased.pop(sb.id, None)
        if self._live_slots is not None:
            self._live_slots.release()
        self._wake.set()
        self._changed.set()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` in the pool's task group; after shutdown began, aclose() does the work instead."""
        if self._tg is not None:
            try:
                self._tg.create_task(coro)
                return
            except RuntimeError:  # the task group is shutting down
                pass
        coro.close()

    # ------------------------------------------------------------------------------------------ refilling

    async def _run(self, ready: asyncio.Event) -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                ready.set()
                await self._refill(tg)
        except Exception:
            log.exception("%s: the refill task crashed", self)
        finally:
            self._tg = None
            ready.set()
            self._fail_waiters(lambda: SandboxStartError(f"{self} stopped refilling"))

    def _deficit(self) -> int:
        waiting = sum(1 for f in self._waiters if not f.done())
        return self.size + waiting - len(self._idle) - self._starting

    async def _refill(self, tg: asyncio.TaskGroup) -> None:
        while True:
            self._wake.clear()
            delay = self._retry_at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
                continue
            if self._deficit() <= 0:
                await self._wake.wait()
                continue
            await self._take_slots()
            if self._deficit() <= 0 or self._retry_at > time.monotonic():
                self._give_slots()
                continue
            self._starting += 1
            tg.create_task(self._start_one())

    async def _take_slots(self) -> None:
        await self._start_slots.acquire()
        if self._live_slots is not None:
            try:
                await self._live_slots.acquire()
            except BaseException:
                self._start_slots.release()
                raise

    def _give_slots(self, live: bool = True) -> None:
        self._start_slots.release()
        if live and self._live_slots is not None:
            self._live_slots.release()

    async def _start_one(self) -> None:
        """Start one sandbox holding the slots taken by the refill loop; the live slot passes to it."""
        try:
            sb = await self.backend.start(self.image, self.limits, self.labels)
        except Exception as e:
            self._starting -= 1
            self._give_slots()
            self._start_failed(e)
            return
        except BaseException:
            self._starting -= 1
            self._give_slots()
            raise
        self._starting -= 1
        self._give_slots(live=False)
        self._mine[sb.id] = sb
        self._counts["started"] += 1
        self._failures = 0
        self._deliver(sb)
        self._wake.set()

    def _start_failed(self, e: Exception) -> None:
        self._counts["failed"] += 1
        self._failures += 1
        self._last_error = e
        delay = min(self.backoff_max_s, self.backoff_s * 2 ** (self._failures - 1))
        self._retry_at = time.monotonic() + delay
        log.warning("%s: sandbox start failed (%d in a row; retry in %.1fs): %s",
                    self, self._failures, delay, e)
        if self._broken():
            self._fail_waiters(self._start_error)
        self._changed.set()
        self._wake.set()

    # ----------------------------------------------------------------------------------------- shutdown

    async def _shutdown(self) -> None:
        self._closed = True
        doomed = dict(self._mine)
        self._tg = None  # no new background work; everything left is closed below
        if self._runner is not None:
            self._runner.cancel()
            await asyncio.wait([self._runner])
        doomed.update(self._mine)
        self._idle.clear()
        self._leased.clear()
        results = await asyncio.gather(*(sb.close() for sb in doomed.values()), return_exceptions=True)
        for sb, res in zip(doomed.values(), results, strict=True):
            if isinstance(res, BaseException):
                log.warning("%s: closing %s failed: %s", self, sb, res)
            self._forget(sb)
        self._fail_waiters(lambda: SandboxStartError(f"{self} is closed"))
        log.debug("%s closed (%s)", self, self.stats())


def _check_config(size: int, max_live: int | None, lease_s: float | None, max_starting: int,
                  max_failures: int, backoff_s: float) -> None:
    if size < 0:
        raise ConfigError(f"SandboxPool size must be >= 0, got {size}")
    if max_live is not None and max_live < 1:
        raise ConfigError(f"SandboxPool max_live must be >= 1 or None, got {max_live}")
    if lease_s is not None and lease_s <= 0:
        raise ConfigError(f"SandboxPool lease_s must be positive or None, got {lease_s}")
    if max_starting < 1 or max_failures < 1 or backoff_s < 0:
        raise ConfigError(f"SandboxPool needs max_starting >= 1, max_failures >= 1 and backoff_s >= 0; got "
                          f"{max_starting}, {max_failures}, {backoff_s}")


PoolKey = tuple[str, str | None, Limits]
POOL_OPTIONS = frozenset(
    {"size", "max_live", "lease_s", "labels", "max_starting", "max_failures", "backoff_s", "backoff_max_s"}
)


class Pools:
    """One SandboxPool per (backend name, image, limits), created on demand.

    ``pool_options`` (size, max_live, lease_s, labels, ...) apply to every pool created; a pool's ``size``
    can be changed after (the farm warms the one pool every episode leases from). ``backends`` are used for
    their names and stay the caller's to close; backends asked for by name and not given are created with
    ``get_backend(name)`` and closed by ``aclose()``. This is what the farm hands every env (``pools=``).
    """

    def __init__(self, backends: Iterable[Backend] = (), **pool_options: Any) -> None:
        unknown = sorted(set(pool_options) - POOL_OPTIONS)
        if unknown:
            known = ", ".join(sorted(POOL_OPTIONS))
            raise ConfigError(f"Pools got unknown SandboxPool options {unknown}; known: {known}")
        self.pool_options = pool_options
        self._pools: dict[PoolKey, SandboxPool] = {}
        self._backends: dict[str, Backend] = {b.name: b for b in backends}
        self._owned: list[Backend] = []
        self._close_task: asyncio.Task[None] | None = None

    def get(
        self, backend: str | Backend, image: str | None = None, limits: Limits | None = None
    ) -> SandboxPool:
        """The pool for this key (created, not yet started, on first use; ``lease()`` starts it)."""
        if self._close_task is not None:
            raise SandboxStartError("this Pools registry is closed")
        be = self.backend(backend)
        key = (be.name, image, limits or Limits())
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = SandboxPool(be, image, key[2], **self.pool_options)
        return pool

    def backend(self, backend: str | Backend) -> Backend:
        """The registry's backend of that name (created on first use when given by name)."""
        name = backend if isinstance(backend, str) else backend.name
        be = self._backends.get(name)
        if be is None:
            if isinstance(backend, str):
                from . import get_backend

                be = get_backend(backend)
                self._owned.append(be)
            else:
                be = backend
            self._backends[name] = be
        return be

    def __iter__(self) -> Iterator[SandboxPool]:
        return iter(list(self._pools.values()))

    def stats(self) -> dict[PoolKey, PoolStats]:
        return {key: pool.stats() for key, pool in self._pools.items()}

    async def aclose(self) -> None:
        """Close every pool, then the backends this registry created. Idempotent; survives cancellation."""
        if self._close_task is None:
            self._close_task = asyncio.ensure_future(self._shutdown())
        await asyncio.shield(self._close_task)

    async def _shutdown(self) -> None:
        await asyncio.gather(*(p.aclose() for p in self._pools.values()), return_exceptions=True)
        await asyncio.gather(*(b.aclose() for b in self._owned), return_exceptions=True)

    async def __aenter__(self) -> Pools:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


__all__ = ["PoolStats", "Pools", "SandboxPool"]
