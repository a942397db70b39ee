"""Docker-specific behaviour: container settings, labels, orphan reaping, a dead daemon."""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap

import pytest

from envfarm.errors import BackendUnavailable
from envfarm.sandbox import Limits, dockerutil, get_backend

pytestmark = pytest.mark.docker


async def test_container_is_locked_down_and_labelled() -> None:
    backend = get_backend("docker")
    async with backend.open(limits=Limits(cpus=0.5, memory_mb=256, pids=50, disk_mb=32)) as sb:
        cid = sb._handle.container_id  # type: ignore[attr-defined]
        info = await asyncio.to_thread(dockerutil.client().api.inspect_container, cid)
    host = info["HostConfig"]
    assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"] and "no-new-privileges" in host["SecurityOpt"]
    assert host["PidsLimit"] == 50 and host["Memory"] == 256 << 20 and host["NanoCpus"] == 500_000_000
    assert "size=32m" in host["Tmpfs"]["/workspace"] and not host["Binds"] and not info["Mounts"]
    assert info["Config"]["User"] == "1000:1000"
    labels = info["Config"]["Labels"]
    assert labels["envfarm"] == "1" and labels["envfarm.owner_pid"] == str(os.getpid())
    assert labels["envfarm.run_id"]


async def test_gc_removes_containers_of_a_killed_owner() -> None:
    script = textwrap.dedent("""
        import asyncio, os, signal
        from envfarm.sandbox import get_backend
        async def main():
            sb = await get_backend("docker").start()
            print(sb._handle.container_id, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)   # no cleanup, no atexit
        asyncio.run(main())
    """)
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    assert proc.returncode == -9
    cid = out.decode().strip()
    api = dockerutil.client().api
    # the container is still there; it may already have stopped (the owner's attach stream closed, so the
    # agent saw end of input), and gc must remove it either way
    assert (await asyncio.to_thread(api.inspect_container, cid))["Id"] == cid
    removed = await get_backend("docker").gc()
    assert removed >= 1
    left = await asyncio.to_thread(api.containers, all=True, filters={"id": cid})
    assert left == []


async def test_gc_spares_live_owners() -> None:
    backend = get_backend("docker")
    async with backend.open() as sb:
        await backend.gc()
        assert (await sb.exec("echo still here")).stdout == "still here\n"


async def test_dead_daemon_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    dockerutil.reset()
    try:
        with pytest.raises(BackendUnavailable, match=r"make setup"):
            await get_backend("docker").check()
        with pytest.raises(BackendUnavailable, match=r"Docker daemon"):
            async with get_backend("docker").open():
                pass
    finally:
        monkeypatch.undo()
        dockerutil.reset()
