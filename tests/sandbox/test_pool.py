"""SandboxPool and Pools on the ``local`` backend (real agent processes, no isolation)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from envfarm.errors import ConfigError, LeaseExpired, SandboxCrashed, SandboxStartError
from envfarm.sandbox import Backend, Limits, Sandbox
from envfarm.sandbox.base import Handle, SandboxSpec
from envfarm.sandbox.local import LocalBackend
from envfarm.sandbox.pool import Pools, PoolStats, SandboxPool

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def backend() -> AsyncIterator[LocalBackend]:
    be = LocalBackend()
    try:
        yield be
    finally:
        await be.aclose()


@pytest.fixture
async def pool(backend: LocalBackend) -> AsyncIterator[SandboxPool]:
    p = SandboxPool(backend, size=2)
    try:
        await p.start(wait=True)
        yield p
    finally:
        await p.aclose()


async def eventually(pred: object, what: str, within_s: float = 20.0) -> None:
    """Poll ``pred()`` until true (background closes finish asynchronously)."""
    assert callable(pred)
    loop = asyncio.get_running_loop()
    end = loop.time() + within_s
    while not pred():
        assert loop.time() < end, f"never happened: {what}"
        await asyncio.sleep(0.02)


def procs_in(dirs: list[str]) -> list[int]:
    """Pids whose working directory is one of the sandboxes' workspaces (agents and their children)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if any(cwd == d or cwd.startswith(d + "/") or cwd == f"{d} (deleted)" for d in dirs):
            found.append(int(entry.name))
    return found


async def test_warm_lease_comes_from_the_idle_queue(pool: SandboxPool) -> None:
    before = pool.stats()
    assert (before.idle, before.started_total, before.leased) == (2, 2, 0)
    async with pool.lease() as sb:
        during = pool.stats()
        assert during.started_total == before.started_total  # no start on the warm path
        assert (during.idle, during.leased, during.leases_total) == (1, 1, 1)
        res = await sb.exec("echo warm")
        assert res.ok and res.stdout == "warm\n"
    await eventually(lambda: pool.stats().idle == 2 and pool.stats().leased == 0, "refill to size")
    assert pool.stats().started_total == 3


async def test_cold_pool_starts_on_demand(backend: LocalBackend) -> None:
    async with SandboxPool(backend, size=0) as p:
        async with p.lease() as sb:
            assert (await sb.exec("echo cold")).stdout == "cold\n"
        assert p.stats().started_total == 1


async def test_leases_are_never_reused(pool: SandboxPool, backend: LocalBackend) -> None:
    seen: list[Sandbox] = []
    for _ in range(3):
        async with pool.lease() as sb:
            seen.append(sb)
    assert len({sb.id for sb in seen}) == 3
    await eventually(lambda: not any(sb.id in backend._live for sb in seen), "released leases closed")
    assert not any(sb.alive for sb in seen)


async def test_max_live_blocks_until_a_lease_is_released(backend: LocalBackend) -> None:
    async with SandboxPool(backend, size=1, max_live=2) as p, AsyncExitStack() as stack:
        first = await stack.enter_async_context(p.lease())
        second = await stack.enter_async_context(p.lease())
        got: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        async def third() -> None:
            async with p.lease() as sb:
                got.set_result(sb.id)

        async with asyncio.TaskGroup() as tg:
            waiting = tg.create_task(third())
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(asyncio.shield(waiting), 0.5)
            assert not got.done()
            assert p.stats().live <= 2
            await stack.aclose()  # release both leases
            await asyncio.wait_for(waiting, 30)
        assert got.result() not in (first.id, second.id)
        assert p.stats().live <= 2


async def test_lease_deadline_kills_the_sandbox(backend: LocalBackend) -> None:
    async with SandboxPool(backend, size=1) as p:
        async with p.lease(deadline_s=0.5) as sb:
            with pytest.raises(LeaseExpired):
                await sb.exec("sleep 5")
            with pytest.raises(LeaseExpired):
                await sb.exec("true")
            assert not sb.alive
        assert p.stats().expired_total == 1


async def test_pool_lease_s_is_the_default_deadline(backend: LocalBackend) -> None:
    async with SandboxPool(backend, size=0, lease_s=0.3) as p, p.lease() as sb:
        with pytest.raises(LeaseExpired, match="lease expired"):
            await sb.exec("sleep 5")


async def test_released_before_deadline_is_not_expired(backend: LocalBackend) -> None:
    async with SandboxPool(backend, size=0, lease_s=0.3) as p:
        async with p.lease() as sb:
            pass
        await asyncio.sleep(0.6)
        assert p.stats().expired_total == 0
        assert not sb.alive  # closed on release, not killed by the timer


async def test_dead_idle_sandbox_is_not_handed_out(pool: SandboxPool) -> None:
    victims = list(pool._idle)  # the pool has no public handle on idle sandboxes
    for victim in victims:
        await victim.kill("killed by the test")
    async with pool.lease() as sb:
        assert sb.alive and sb.id not in {v.id for v in victims}
        assert (await sb.exec("echo ok")).stdout == "ok\n"


def pid_exists(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def agent_pids(backend: LocalBackend) -> list[int]:
    return [sb._handle.pipe.proc.pid for sb in backend._live.values()]  # type: ignore[attr-defined]


async def test_aclose_leaves_nothing_running(backend: LocalBackend) -> None:
    p = SandboxPool(backend, size=3)
    await p.start(wait=True)
    cm = p.lease()
    held = await cm.__aenter__()
    await p.wait_filled()  # 3 idle again + 1 leased
    pids = agent_pids(backend)
    assert len(pids) == 4 and all(map(pid_exists, pids))
    await p.aclose()
    await p.aclose()  # idempotent
    assert backend.live == 0
    assert p.stats() == PoolStats(0, 0, 0, 0, 4, 0, 1, 0)
    assert not any(map(pid_exists, pids))
    assert not held.alive
    await cm.__aexit__(None, None, None)  # releasing after aclose is harmless
    with pytest.raises(SandboxStartError, match="closed"):
        async with p.lease():
            pass


async def test_aclose_kills_commands_in_flight(backend: LocalBackend) -> None:
    p = SandboxPool(backend, size=0)
    await p.start()
    cm = p.lease()
    held = await cm.__aenter__()
    bg = asyncio.create_task(held.exec("sleep 30"))
    try:
        await eventually(lambda: procs_in([held.workdir]) != agent_pids(backend), "sleep started")
        await p.aclose()
        assert backend.live == 0
        with pytest.raises(SandboxCrashed):
            await bg
        assert not procs_in([held.workdir])
    finally:
        bg.cancel()
        await asyncio.wait([bg])
        await cm.__aexit__(None, None, None)
        for pid in procs_in([held.workdir]):  # what the backend left behind
            os.kill(pid, signal.SIGKILL)


async def test_aclose_survives_cancellation(backend: LocalBackend) -> None:
    p = SandboxPool(backend, size=2)
    await p.start(wait=True)
    closer = asyncio.create_task(p.aclose())
    await asyncio.sleep(0)
    closer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closer
    await p.aclose()
    assert backend.live == 0


async def test_cancelled_holder_closes_its_sandbox(pool: SandboxPool, backend: LocalBackend) -> None:
    got: asyncio.Future[Sandbox] = asyncio.get_running_loop().create_future()

    async def holder() -> None:
        async with pool.lease() as sb:
            got.set_result(sb)
            await sb.exec("sleep 30")

    task = asyncio.create_task(holder())
    sb = await got
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    try:
        await eventually(lambda: sb.id not in backend._live, "cancelled lease closed")
        assert not sb.alive and pool.stats().leased == 0
        assert not procs_in([sb.workdir]), "the cancelled command outlived its sandbox"
    finally:
        for pid in procs_in([sb.workdir]):
            os.kill(pid, signal.SIGKILL)


class FailingBackend(LocalBackend):
    name = "local"

    async def _open(self, spec: SandboxSpec) -> Handle:
        raise OSError("no sandboxes today")


async def test_start_failures_raise_after_retries() -> None:
    p = SandboxPool(FailingBackend(), size=0, max_failures=3, backoff_s=0.01)
    try:
        with pytest.raises(SandboxStartError, match=r"3 sandbox starts in a row failed.*no sandboxes today"):
            async with p.lease():
                pass
        assert p.stats().failed_total == 3
        with pytest.raises(SandboxStartError):  # still broken: raises again, no hang
            await asyncio.wait_for(p.lease().__aenter__(), 10)
    finally:
        await p.aclose()


async def test_wait_filled_raises_when_starts_keep_failing() -> None:
    p = SandboxPool(FailingBackend(), size=2, max_failures=2, backoff_s=0.01)
    try:
        with pytest.raises(SandboxStartError):
            await asyncio.wait_for(p.start(wait=True), 10)
    finally:
        await p.aclose()


class CountingBackend(LocalBackend):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.peak = 0

    async def _open(self, spec: SandboxSpec) -> Handle:
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            await asyncio.sleep(0.05)
            return await super()._open(spec)
        finally:
            self.now -= 1


async def test_refill_bounds_concurrent_starts() -> None:
    be = CountingBackend()
    try:
        async with SandboxPool(be, size=6, max_starting=2) as p:
            await p.wait_filled()
            assert be.peak == 2
            assert p.stats().idle == 6
    finally:
        await be.aclose()


async def test_pools_registry_one_pool_per_key(backend: LocalBackend) -> None:
    async with Pools(size=1) as pools:
        a = pools.get("local")
        assert pools.get("local", None, Limits()) is a
        assert pools.get(backend, None, Limits()) is a  # same backend name
        b = pools.get("local", None, Limits(memory_mb=256))
        c = pools.get("local", "some-image")
        assert len({id(a), id(b), id(c)}) == 3
        async with b.lease() as sb:
            assert sb.limits == Limits(memory_mb=256)
        be = a.backend
    assert be.live == 0


async def test_pool_on_isolated_backends(isolated_backend: Backend) -> None:
    """The same lease, expiry and teardown on docker and bwrap (their kill is a container/namespace kill)."""
    async with SandboxPool(isolated_backend, size=1, limits=Limits(memory_mb=256)) as p:
        await p.wait_filled()
        async with p.lease() as sb:
            assert (await sb.exec("echo hi")).stdout == "hi\n"
        async with p.lease(deadline_s=0.5) as sb:
            await eventually(lambda: not sb.alive, "lease expired")
            with pytest.raises(LeaseExpired):
                await sb.exec("true")
        assert p.stats().expired_total == 1
    assert isolated_backend.live == 0


async def test_lease_expiry_interrupts_exec_on_isolated_backends(isolated_backend: Backend) -> None:
    async with SandboxPool(isolated_backend, size=0, limits=Limits(memory_mb=256)) as p:
        for _ in range(3):
            async with p.lease(deadline_s=1) as sb:
                with pytest.raises(LeaseExpired):
                    await sb.exec("sleep 30")
    assert isolated_backend.live == 0


async def test_pools_rejects_unknown_options_and_use_after_close() -> None:
    with pytest.raises(ConfigError, match="sise"):
        Pools(sise=3)
    pools = Pools(size=0)
    await pools.aclose()
    with pytest.raises(SandboxStartError, match="closed"):
        pools.get("local")
