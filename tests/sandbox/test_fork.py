"""Sandbox.fork on the isolating backends: a child is a copy of its parent's files, independent afterwards."""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from envfarm.errors import ForkError, ForkUnsupported
from envfarm.sandbox import Backend, Limits, Sandbox, get_backend

# what the parent holds: workspace files of several kinds, /tmp and /dev/shm
PREPARE = """set -e
mkdir -p src/pkg empty
printf 'print(1)\\n' > src/pkg/a.py
printf '#!/bin/sh\\necho run\\n' > src/run.sh && chmod 755 src/run.sh
echo secret > locked && chmod 000 locked
echo ro > ro.txt && chmod 444 ro.txt
ln -s src/pkg/a.py link
mkfifo pipe
echo gone > doomed.txt
echo tmp > /tmp/t.txt
echo shm > /dev/shm/s.txt
"""
LISTING = ("cd /workspace && find . /tmp/t.txt /dev/shm/s.txt \\( -type d -printf '%p %M %u %g\\n' \\) "
           "-o -printf '%p %M %u %g %s %l\\n' | sort")  # a folder's size is its file system's business


async def _listing(sb: Sandbox) -> str:
    return (await sb.exec(LISTING, check=True)).stdout


async def _exists(sb: Sandbox, path: str) -> bool:
    return (await sb.exec(["test", "-e", path])).exit_code == 0


async def test_child_copies_files_modes_and_owners(isolated_backend: Backend) -> None:
    async with isolated_backend.open() as parent:
        await parent.exec(PREPARE, check=True)
        before = await _listing(parent)
        async with await parent.fork() as child:
            assert child.parent_id == parent.id and parent.parent_id is None
            assert child.limits == parent.limits and child.spec.image == parent.spec.image
            assert await _listing(child) == before
            assert "./locked ---------- agent agent 7" in before
            assert (await child.exec("./src/run.sh; cat link /tmp/t.txt /dev/shm/s.txt")).stdout == \
                "run\nprint(1)\ntmp\nshm\n"
            assert (await child.exec("cat ro.txt; echo x >> ro.txt")).exit_code != 0  # still read-only
            assert (await child.exec("whoami; touch new && stat -c %U new")).stdout == "agent\nagent\n"


async def test_dev_shm_is_a_tmpfs_that_holds_semaphores(isolated_backend: Backend) -> None:
    """glibc before 2.34 (Debian 11 and older images) keeps POSIX semaphores only where statfs says
    tmpfs; on an overlay it tries /dev and ``multiprocessing.Lock()`` fails with EACCES."""
    async with isolated_backend.open() as parent:
        await parent.exec("echo shm > /dev/shm/s.txt", check=True)
        async with await parent.fork() as child:
            for sb in (parent, child):
                assert (await sb.exec("stat -f -c %T /dev/shm; cat /dev/shm/s.txt")).stdout == "tmpfs\nshm\n"
            lock = await child.exec(["python3", "-c", "import multiprocessing as m; m.Lock(); print('ok')"])
            assert lock.stdout == "ok\n", lock.stderr
            await child.exec("echo child > /dev/shm/s.txt", check=True)
            assert (await parent.exec("cat /dev/shm/s.txt")).stdout == "shm\n"


async def test_children_parent_and_siblings_are_independent(isolated_backend: Backend) -> None:
    async with isolated_backend.open() as parent:
        await parent.exec(PREPARE, check=True)
        async with await parent.fork() as a, await parent.fork() as b:
            await a.exec("echo a > only-a; echo changed > src/pkg/a.py; rm doomed.txt; rm -r empty; "
                         "chmod 600 src/run.sh; echo a > /tmp/t.txt", check=True)
            await parent.exec("echo p > only-parent; rm src/pkg/a.py; echo later > /dev/shm/s.txt",
                              check=True)
            for sb in (parent, b):
                assert not await _exists(sb, "only-a")
                assert await _exists(sb, "doomed.txt") and await _exists(sb, "empty")
                assert (await sb.exec("stat -c %a src/run.sh; cat /tmp/t.txt")).stdout == "755\ntmp\n"
            assert (await b.exec("cat src/pkg/a.py")).stdout == "print(1)\n"
            for sb in (a, b):
                assert not await _exists(sb, "only-parent")
                assert (await sb.exec("cat /dev/shm/s.txt")).stdout == "shm\n"
            assert (await a.exec("cat src/pkg/a.py")).stdout == "changed\n"
            assert not await _exists(a, "doomed.txt")


async def test_grandchild_and_closing_the_parent(isolated_backend: Backend) -> None:
    """Closing a parent leaves its children running: a child owns a full copy, nothing is shared."""
    parent = await isolated_backend.start()
    try:
        await parent.write_file("gen.txt", "0\n")
        child = await parent.fork()
    finally:
        await parent.close()
    async with child:
        await child.write_file("gen.txt", "1\n")
        async with await child.fork() as grandchild:
            assert grandchild.parent_id == child.id
            await child.close()
            assert (await grandchild.exec("cat gen.txt")).stdout == "1\n"
        with pytest.raises(ForkError, match="closed"):
            await child.fork()


async def test_fork_waits_for_the_command_in_flight(isolated_backend: Backend) -> None:
    async with isolated_backend.open() as parent:
        running = asyncio.create_task(parent.exec("sleep 0.5; echo done > f"))
        await asyncio.sleep(0.1)
        async with await parent.fork() as child:
            assert running.done() and (await running).exit_code == 0
            assert (await child.read_file("f")) == b"done\n"


async def test_disk_cap_holds_in_a_child(isolated_backend: Backend) -> None:
    """The cap bounds what each sandbox writes (its own upper layer); the files it shares are free."""
    async with isolated_backend.open(limits=Limits(disk_mb=64, memory_mb=256)) as parent:
        await parent.exec("head -c 40M /dev/zero > big", check=True)
        async with await parent.fork() as child:
            res = await child.exec("dd if=/dev/zero of=fill bs=1M count=100", timeout_s=60)
            assert "No space left" in res.stderr
            assert int((await child.exec("stat -c %s fill")).stdout) <= 64 << 20
            await child.exec("rm fill big", check=True)
            assert (await child.exec("echo ok > small && cat small")).stdout == "ok\n"
            assert (await parent.exec("ls")).stdout == "big\n"
            await parent.exec("head -c 60M /dev/zero > more", check=True)  # the child's writes are its own
            assert (await child.exec("ls")).stdout == "small\n"


async def test_a_backend_without_fork_says_so() -> None:
    backend = get_backend("local")
    async with backend.open() as sb:
        with pytest.raises(ForkUnsupported, match="bwrap"):
            await sb.fork()
    assert backend.live == 0


# ---------------------------------------------------------------------------- the hostile probes, in a child

def _hostile() -> ModuleType:
    path = Path(__file__).with_name("test_hostile.py")
    spec = importlib.util.spec_from_file_location("_hostile_probes", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PROBES = [
    "test_fork_bomb_is_capped_by_pids",
    "test_memory_hog_is_oom_killed",
    "test_disk_fill_stops_at_the_workspace_cap",
    "test_shm_and_open_files_are_capped",
    "test_commands_cannot_kill_or_hijack_the_agent",
    "test_root_is_read_only_and_user_unprivileged",
    "test_host_paths_and_docker_socket_are_invisible",
    "test_only_loopback_network",
]


class ForkingBackend:
    """Stands in for a backend: each sandbox it opens is the fork of a parent that held a file and was
    closed before the probe starts."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    @asynccontextmanager
    async def open(self, image: str | None = None, limits: Limits | None = None,
                   labels: dict[str, str] | None = None) -> AsyncIterator[Sandbox]:
        async with self._backend.open(image, limits, labels) as parent:
            await parent.write_file("seed.txt", "seed\n")
            child = await parent.fork()
        try:
            assert (await child.read_file("seed.txt")) == b"seed\n"
            yield child
        finally:
            await child.close()


@pytest.mark.parametrize("probe", PROBES)
async def test_hostile_probes_hold_in_a_child(isolated_backend: Backend, probe: str) -> None:
    await getattr(_hostile(), probe)(ForkingBackend(isolated_backend))


@pytest.mark.docker
async def test_sandbox_list_shows_the_parent() -> None:
    from envfarm.commands.sandbox import list_containers

    backend = get_backend("docker")
    try:
        async with backend.open() as parent, await parent.fork() as child:
            await child.exec("true", check=True)  # a child boots in the background
            rows = {r.name: r for r in await asyncio.to_thread(list_containers)}
            assert rows[f"envfarm-{child.id}"].parent == f"envfarm-{parent.id}"
            assert rows[f"envfarm-{parent.id}"].parent == ""
    finally:
        await backend.aclose()


async def test_sandbox_list_shows_bwrap_children_and_gc_spares_them() -> None:
    from envfarm.commands.sandbox import list_bwrap
    from envfarm.sandbox.fork import store

    backend = get_backend("bwrap")
    try:
        async with backend.open() as parent, await parent.fork() as child:
            rows = {r.name: r for r in await asyncio.to_thread(list_bwrap)}
            assert rows[child.id].parent == parent.id and rows[parent.id].parent == ""
            assert rows[child.id].owner == "alive" and rows[child.id].state == "running"
            await backend.gc()  # live owners keep their layers
            assert {child.id, parent.id} <= {p.name for p in store().boxes.iterdir()}
            assert (await child.exec("echo ok")).stdout == "ok\n"
        assert not {child.id, parent.id} & {p.name for p in store().boxes.iterdir()}
    finally:
        await backend.aclose()


async def test_pool_fork_leases_children(isolated_backend: Backend) -> None:
    from envfarm.sandbox.pool import SandboxPool

    async with SandboxPool(isolated_backend, size=0, max_live=3) as pool, pool.lease() as sb:
        await sb.write_file("x.txt", "x\n")
        async with pool.fork(sb, 2) as children:
            assert [c.parent_id for c in children] == [sb.id, sb.id]
            assert [(await c.read_file("x.txt")) for c in children] == [b"x\n", b"x\n"]
            assert pool.stats().leased == 3
        assert pool.stats().leased == 1
        async with asyncio.timeout(30):  # closed in the background, their max_live slots come back
            async with pool.fork(sb, 1, deadline_s=0.3) as (child,):
                await asyncio.sleep(0.6)
                assert not child.alive
        assert not any(c.alive for c in children)
