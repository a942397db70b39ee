"""Docker-specific behaviour: container settings, labels, orphan reaping, a dead daemon."""

from __future__ import annotations

import asyncio
import os
import pwd
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from docker.errors import APIError
from midway import cancel_midway

from envfarm.commands.doctor import run_checks
from envfarm.errors import BackendUnavailable
from envfarm.sandbox import Limits, dockerutil, fork, get_backend
from envfarm.sandbox.docker import DockerBackend, userns_remapped

pytestmark = pytest.mark.docker


async def test_container_is_locked_down_and_labelled() -> None:
    backend = get_backend("docker")
    async with backend.open(limits=Limits(cpus=0.5, memory_mb=256, pids=50, disk_mb=32)) as sb:
        cid = sb._handle.container_id  # type: ignore[attr-defined]
        info = await asyncio.to_thread(dockerutil.client().api.inspect_container, cid)
        stacks = backend._files._files[sb.id].stacks  # type: ignore[attr-defined]
        caps = {name: _tmpfs_size(stack.upper.path) for name, stack in stacks.items()}
    host = info["HostConfig"]
    assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"] and "no-new-privileges" in host["SecurityOpt"]
    assert host["PidsLimit"] == 50 and host["Memory"] == 256 << 20 and host["NanoCpus"] == 500_000_000
    # the only host paths inside: the sandbox's own overlays in envfarm's layer store (sandbox/fork.py),
    # their uppers on tmpfs of the caps
    assert not host.get("Tmpfs") and not host["Binds"]
    mounts = {m["Destination"]: m for m in info["Mounts"]}
    assert sorted(mounts) == ["/dev/shm", "/tmp", "/workspace"]
    for m in mounts.values():
        assert m["Type"] == "bind" and m["Propagation"] == "rslave"
        assert Path(m["Source"]).parent == fork.store().boxes / sb.id
    assert caps == {"workspace": 32 << 10, "tmp": 32 << 10, "shm": Limits().shm_mb << 10}
    assert info["Config"]["User"] == "1000:1000"
    assert host["LogConfig"] == {"Type": "none", "Config": {}}  # nothing a sandbox prints lands on host disk
    ulimits = {u["Name"]: (u["Soft"], u["Hard"]) for u in host["Ulimits"]}
    assert ulimits == {"core": (0, 0), "nofile": (Limits().open_files, Limits().open_files)}
    labels = info["Config"]["Labels"]
    assert labels["envfarm"] == "1" and labels["envfarm.owner_pid"] == str(os.getpid())
    assert labels["envfarm.run_id"]


def _tmpfs_size(path: Path) -> int:
    """The size= option (KiB) of the tmpfs mounted at ``path``."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == str(path):
            opts = dict(o.partition("=")[::2] for o in fields[-1].split(","))
            return int(opts["size"].rstrip("k"))
    raise AssertionError(f"no tmpfs at {path}")


def host_view(pid: int, names: list[str]) -> tuple[set[int], set[int]]:
    """Host-side owners of /workspace files of the container whose PID 1 is host ``pid``, and its uids."""
    root = Path(f"/proc/{pid}/root/workspace")
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    uid_line = next(line for line in status if line.startswith("Uid:"))
    return {(root / name).stat().st_uid for name in names}, {int(u) for u in uid_line.split()[1:]}


async def test_sandbox_uids_belong_to_no_host_user() -> None:
    """Under `dockerd --userns-remap` (make setup) uid 1000 inside is a subordinate uid outside: a file the
    agent creates in /workspace (a tmpfs, no bind mount) and the agent process itself belong to no entry of
    the host's /etc/passwd, so a sandbox escape lands as a nobody."""
    assert userns_remapped(), "dockerd runs without --userns-remap; run `make setup`"
    host_uids = {p.pw_uid for p in pwd.getpwall()}
    async with get_backend("docker").open() as sb:
        await sb.write_file("/workspace/made-inside", "x")
        await sb.exec("touch /workspace/touched", check=True)
        cid = sb._handle.container_id  # type: ignore[attr-defined]
        pid = (await asyncio.to_thread(dockerutil.client().api.inspect_container, cid))["State"]["Pid"]
        file_uids, proc_uids = await asyncio.to_thread(host_view, pid, ["made-inside", "touched"])
    assert len(file_uids) == 1 and len(proc_uids) == 1 and file_uids == proc_uids
    assert not file_uids & host_uids, f"sandbox files belong to host user(s) {file_uids & host_uids}"
    assert min(file_uids) >= 100000  # shadow's SUB_UID_MIN: where /etc/subuid ranges start


def test_doctor_reports_the_userns_remap() -> None:
    row = next(c for c in run_checks() if c.name == "docker userns remap")
    assert row.ok and row.detail.startswith("on: container uid 1000 is host uid "), row


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


async def test_a_start_cancelled_while_the_daemon_creates_leaves_no_container(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A cancellation (a closing pool, a timeout) that lands while the daemon creates the container: the
    cleanup must not remove "nothing by that name" before the container exists. Here the daemon's answer is
    held back until the cleanup has tried to remove (the way a busy daemon answers late)."""
    api = dockerutil.client().api
    began, tried_removing, ended = threading.Event(), threading.Event(), threading.Event()
    real_create, real_remove = api.create_container, DockerBackend._remove

    def late_create(*args: object, **kwargs: object) -> object:
        began.set()
        tried_removing.wait(2.0)  # the cleanup's remove, if it runs before this call ends
        try:
            return real_create(*args, **kwargs)
        finally:
            ended.set()

    def remove(name_or_id: str) -> None:
        real_remove(name_or_id)
        tried_removing.set()
        time.sleep(0.3)  # the sandbox's mounts outlive the remove for a moment, as on a busy host

    monkeypatch.setattr(api, "create_container", late_create)
    monkeypatch.setattr(DockerBackend, "_remove", staticmethod(remove))
    backend, owned = get_backend("docker"), {"label": f"envfarm.owner_pid={os.getpid()}"}
    before = {c["Id"] for c in api.containers(all=True, filters=owned)}
    await cancel_midway(backend.start(), began, ended)
    left = [c for c in api.containers(all=True, filters=owned) if c["Id"] not in before]
    for c in left:
        real_remove(c["Id"])
    assert not left, "the cancelled start left its container"
    assert backend._files._files == {}  # type: ignore[attr-defined]


async def test_a_failed_remove_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A busy daemon that fails to kill the container (a 500) does not leave it behind: it is asked again."""
    api, failed = dockerutil.client().api, []
    real = api.remove_container

    def flaky(*args: object, **kwargs: object) -> None:
        if not failed:
            failed.append(args)
            raise APIError("cannot remove container: tried to kill it, but did not receive an exit event")
        real(*args, **kwargs)

    backend = get_backend("docker")
    sb = await backend.start()
    cid = sb._handle.container_id  # type: ignore[attr-defined]
    monkeypatch.setattr(api, "remove_container", flaky)
    await sb.close()
    assert failed and not api.containers(all=True, filters={"id": cid})
