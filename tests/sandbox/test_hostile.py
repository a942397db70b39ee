"""Hostile input against the isolating backends: each test asserts containment and that the host and the
other sandboxes keep working."""

from __future__ import annotations

import asyncio
import time

import pytest

from envfarm.errors import SandboxCrashed
from envfarm.sandbox import Backend, Limits, Sandbox


async def assert_healthy(backend: Backend, *others: Sandbox) -> None:
    """The host can still spawn processes, the other sandboxes answer, and a new one starts."""
    host = await asyncio.create_subprocess_exec("true")
    assert await asyncio.wait_for(host.wait(), 10) == 0
    for sb in others:
        assert (await sb.exec("echo ok", timeout_s=10)).stdout == "ok\n"
    async with backend.open() as fresh:
        assert (await fresh.exec("echo fresh")).stdout == "fresh\n"


async def test_fork_bomb_is_capped_by_pids(hostile_backend: Backend) -> None:
    async with hostile_backend.open(limits=Limits(pids=64)) as sb, hostile_backend.open() as bystander:
        t0 = time.perf_counter()
        res = await sb.exec(":(){ :|:& };:", timeout_s=5)
        assert time.perf_counter() - t0 < 20
        assert "Resource temporarily unavailable" in res.stderr or res.timed_out, res  # the pids cap hit
        assert (await sb.exec("echo survived")).stdout == "survived\n"
        count = int((await sb.exec("ps -e --no-headers | wc -l")).stdout)
        assert count < 10, f"{count} processes left after the fork bomb"
        await assert_healthy(hostile_backend, bystander)


async def test_memory_hog_is_oom_killed(hostile_backend: Backend) -> None:
    async with hostile_backend.open(limits=Limits(memory_mb=128)) as sb:
        res = await sb.exec("python3 -c 'b = bytearray(512 << 20); print(len(b))'", timeout_s=30)
        assert res.exit_code in (-9, 137), res
        assert "536870912" not in res.stdout
        assert (await sb.exec("echo alive")).stdout == "alive\n"
        await assert_healthy(hostile_backend, sb)


async def test_disk_fill_stops_at_the_workspace_cap(hostile_backend: Backend) -> None:
    async with hostile_backend.open(limits=Limits(disk_mb=64, memory_mb=512)) as sb:
        res = await sb.exec("dd if=/dev/zero of=fill bs=1M count=1000", timeout_s=60)
        assert res.exit_code != 0 and "No space left" in res.stderr
        size = int((await sb.exec("stat -c %s fill")).stdout)
        assert size <= 64 << 20
        tmp = await sb.exec("dd if=/dev/zero of=/tmp/fill bs=1M count=1000", timeout_s=60)
        assert "No space left" in tmp.stderr
        await sb.exec("rm -f fill /tmp/fill", check=True)
        assert (await sb.exec("echo ok > small && cat small")).stdout == "ok\n"
        await assert_healthy(hostile_backend, sb)


async def test_shm_and_open_files_are_capped(hostile_backend: Backend) -> None:
    async with hostile_backend.open(limits=Limits(shm_mb=8, open_files=256, memory_mb=256)) as sb:
        res = await sb.exec("dd if=/dev/zero of=/dev/shm/fill bs=1M count=100", timeout_s=30)
        assert res.exit_code != 0 and "No space left" in res.stderr, res
        assert int((await sb.exec("stat -c %s /dev/shm/fill")).stdout) <= 8 << 20
        limits = (await sb.exec("grep 'Max open files' /proc/self/limits", check=True)).stdout.split()
        assert limits[3:5] == ["256", "256"], limits  # soft and hard
        leak = "import os\nfds = []\ntry:\n    while True: fds.append(os.open('/dev/null', os.O_RDONLY))\n" \
               "except OSError as e: print(e.errno, len(fds))"
        res = await sb.exec(["python3", "-c", leak])
        errno_, opened = res.stdout.split()
        assert errno_ == "24" and int(opened) < 256  # EMFILE
        assert (await sb.exec("ulimit -n 100000")).exit_code != 0  # the hard cap cannot be raised
        await assert_healthy(hostile_backend, sb)


async def test_huge_output_is_truncated_not_buffered(hostile_backend: Backend) -> None:
    async with hostile_backend.open() as sb:
        res = await sb.exec("head -c 300000000 /dev/urandom", timeout_s=120)
        assert res.truncated and not res.timed_out
        assert len(res.stdout.encode()) <= 3 * sb.limits.output_bytes  # replacement chars widen bytes
        await assert_healthy(hostile_backend, sb)


async def test_commands_cannot_kill_or_hijack_the_agent(hostile_backend: Backend) -> None:
    """Commands run as the agent's uid; a policy must not turn a failing episode into an infra error."""
    async with hostile_backend.open() as sb:
        for attack in ("kill -9 $PPID", "kill -9 -1", "kill -INT 1", "kill -STOP 1", "kill -9 1"):
            await sb.exec(attack, timeout_s=10)
            assert (await sb.exec("echo alive")).stdout == "alive\n", attack
        res = await sb.exec("echo '{\"id\": 99, \"op\": \"ping\"}' > /proc/1/fd/0")
        assert res.exit_code != 0, "a command could write into the agent's input"
        assert (await sb.exec("cat /proc/1/environ")).exit_code != 0
        assert (await sb.exec("echo alive")).stdout == "alive\n"


async def test_root_is_read_only_and_user_unprivileged(hostile_backend: Backend) -> None:
    async with hostile_backend.open() as sb:
        assert (await sb.exec("id -u")).stdout.strip() == "1000"
        for path in ("/etc/evil", "/usr/bin/evil", "/evil", "/var/evil"):
            res = await sb.exec(["touch", path])
            assert res.exit_code != 0, f"wrote {path}"
        status = (await sb.exec("cat /proc/self/status")).stdout
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        assert int(fields["CapEff"], 16) == 0 and int(fields["CapPrm"], 16) == 0
        assert fields["NoNewPrivs"].strip() == "1"
        su = await sb.exec("su -c id root", timeout_s=10)
        assert su.exit_code != 0


async def test_host_paths_and_docker_socket_are_invisible(hostile_backend: Backend) -> None:
    async with hostile_backend.open() as sb:
        for path in ("/var/run/docker.sock", "/run/docker.sock", "/work", "/root/.cache", "/opt/wheels"):
            assert (await sb.exec(["test", "-e", path])).exit_code != 0, f"{path} is visible"
        ls = await sb.exec("ls -A /workspace /tmp")
        assert "envfarm" not in ls.stdout


async def test_only_loopback_network(hostile_backend: Backend) -> None:
    async with hostile_backend.open() as sb:
        ifaces = (await sb.exec("ls /sys/class/net 2>/dev/null")).stdout.split()
        assert ifaces in ([], ["lo"])  # bwrap mounts no /sys at all; /proc/net/dev is the real check
        dev = (await sb.exec("tail -n +3 /proc/net/dev")).stdout
        assert [line.split(":")[0].strip() for line in dev.splitlines()] == ["lo"]
        routes = (await sb.exec("cat /proc/net/route")).stdout.splitlines()
        assert len(routes) <= 1, routes  # header only: no route anywhere


@pytest.mark.docker
async def test_container_killed_mid_command_raises_crashed() -> None:
    from envfarm.sandbox import get_backend
    from envfarm.sandbox.dockerutil import client

    backend = get_backend("docker")
    async with backend.open() as sb, backend.open() as bystander:
        task = asyncio.create_task(sb.exec("sleep 60", timeout_s=120))
        await asyncio.sleep(0.5)
        cid = sb._handle.container_id  # type: ignore[attr-defined]
        await asyncio.to_thread(client().api.kill, cid)
        t0 = time.perf_counter()
        with pytest.raises(SandboxCrashed, match=r"died|exited|removed|OOM"):
            await task
        assert time.perf_counter() - t0 < 5
        with pytest.raises(SandboxCrashed):
            await sb.exec("echo again")
        await assert_healthy(backend, bystander)
    await backend.aclose()


@pytest.mark.slow
async def test_256_sandboxes_at_once(hostile_backend: Backend) -> None:
    n = 256
    gate = asyncio.Semaphore(16)
    limits = Limits(memory_mb=64, pids=32, disk_mb=16)

    async def start(i: int) -> Sandbox:
        async with gate:
            return await hostile_backend.start(limits=limits)

    boxes: list[Sandbox] = []
    try:
        results = await asyncio.gather(*(start(i) for i in range(n)), return_exceptions=True)
        boxes = [b for b in results if isinstance(b, Sandbox)]
        errors = [r for r in results if not isinstance(r, Sandbox)]
        assert not errors, errors[:3]
        assert hostile_backend.live == n
        outs = await asyncio.gather(*(b.exec(f"echo {i}") for i, b in enumerate(boxes)))
        assert [o.stdout for o in outs] == [f"{i}\n" for i in range(n)]
        await assert_healthy(hostile_backend)
    finally:
        await asyncio.gather(*(b.close() for b in boxes))
    assert hostile_backend.live == 0
