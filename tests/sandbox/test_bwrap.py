"""bwrap-specific behaviour: uids, read-only root, tmpfs caps, network, cgroup limits, teardown and gc.

The exec/file/hostile suite shared by every backend lives elsewhere; these tests look at what only the
bwrap backend does. They need root, bubblewrap, setpriv and a rootfs (``make setup``); without them they
skip with the reason. The cgroup v2 layout is checked against a fake cgroupfs folder (no root needed).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from envfarm.errors import BackendUnavailable, ConfigError, ImageError, SandboxCrashed
from envfarm.sandbox import get_backend
from envfarm.sandbox.base import Limits
from envfarm.sandbox.bwrap import DEFAULT_HOST_UID, KSM_RUN, BwrapBackend, BwrapHandle, check_rootfs
from envfarm.sandbox.cgroups import Cgroup, CgroupTree, cgroup_name

CHECKOUT = Path(__file__).resolve().parents[2]
KSM_KERNEL = KSM_RUN.exists()


@pytest.fixture(scope="module")
def rootfs() -> Path:
    """The base rootfs that `make setup` builds. Missing or unusable is a failure, never a skip: `make test`
    runs setup first, so a skip here would hide a broken install."""
    from envfarm.sandbox.images import rootfs_for

    path = check_rootfs(Path(rootfs_for(None)), DEFAULT_HOST_UID)
    asyncio.run(BwrapBackend(rootfs=path).check())
    return path


@pytest.fixture
async def backend(rootfs: Path) -> AsyncIterator[BwrapBackend]:
    b = BwrapBackend(rootfs=rootfs)
    try:
        yield b
    finally:
        await b.aclose()


def handle(sb: object) -> BwrapHandle:
    h = sb._handle  # type: ignore[attr-defined]
    assert isinstance(h, BwrapHandle)
    return h


# ---------------------------------------------------------------------------------------------- identity


@pytest.mark.bwrap
async def test_agent_uid_inside_and_unprivileged_host_uid(backend: BwrapBackend) -> None:
    async with backend.open() as sb:
        res = await sb.exec("id -u; id -g; grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status", check=True)
        uid, gid, *caps = res.stdout.split("\n")
        assert (uid, gid) == ("1000", "1000")
        assert all(line.endswith("0000000000000000") for line in caps if line)
        pids = handle(sb).cgroup.pids()
        assert len(pids) >= 2  # bwrap, and the agent (PID 1 inside: --as-pid-1)
        ps = await asyncio.create_subprocess_exec("ps", "-o", "uid=", "-p", ",".join(map(str, pids)),
                                                  stdout=asyncio.subprocess.PIPE)
        out = (await ps.communicate())[0].decode().split()
        assert out and all(int(u) == backend.config.host_uid != 0 for u in out), out


@pytest.mark.bwrap
async def test_rlimits(backend: BwrapBackend) -> None:
    async with backend.open(limits=Limits(disk_mb=16)) as sb:
        res = await sb.exec("grep -E '^Max (file size|core file size)' /proc/self/limits", check=True)
        assert f"Max file size             {17 << 20}" in res.stdout  # disk_mb + 1 MiB: ENOSPC comes first
        assert "Max core file size        0                    0" in res.stdout


# -------------------------------------------------------------------------------------------- filesystem


@pytest.mark.bwrap
async def test_root_is_read_only_and_tmpfs_writable(backend: BwrapBackend) -> None:
    async with backend.open() as sb:
        for path in ("/usr/x", "/etc/x", "/x", "/dev/x"):
            res = await sb.exec(["touch", path])
            assert res.exit_code != 0 and "Read-only file system" in res.stderr, (path, res)
        res = await sb.exec("touch /workspace/a /tmp/b /dev/shm/c && stat -c %u . && pwd && echo $HOME")
        assert res.ok, res
        assert res.stdout.splitlines() == ["1000", "/workspace", "/workspace"]


@pytest.mark.bwrap
async def test_workspace_is_capped_and_sandbox_survives(backend: BwrapBackend) -> None:
    async with backend.open(limits=Limits(disk_mb=8)) as sb:
        res = await sb.exec("dd if=/dev/zero bs=1M count=20 of=/workspace/a")
        assert res.exit_code == 1 and "No space left on device" in res.stderr, res  # not SIGXFSZ
        dd = "dd if=/dev/zero bs=1M count=6 of="
        res = await sb.exec(f"rm /workspace/a; {dd}/workspace/a && {dd}/workspace/b")
        assert res.exit_code != 0 and "No space left on device" in res.stderr, res
        res = await sb.exec("dd if=/dev/zero of=/tmp/c bs=1M count=12")
        assert res.exit_code != 0, res  # /tmp has its own cap
        res = await sb.exec("rm /workspace/a /workspace/b && echo ok > /workspace/c && cat /workspace/c")
        assert res.ok and res.stdout == "ok\n", res


@pytest.mark.bwrap
async def test_host_paths_not_visible(backend: BwrapBackend, tmp_path: Path) -> None:
    marker = tmp_path / "host-marker"
    marker.write_text("secret")
    async with backend.open() as sb:
        for path in (str(marker), str(CHECKOUT), str(Path.cwd()), "/var/run/docker.sock", "/run/docker.sock",
                     str(backend.config.cgroup_root / "pids")):
            res = await sb.exec(["test", "-e", path])
            assert res.exit_code == 1, path
        res = await sb.exec(["ls", "/root"])
        assert "cache" not in res.stdout
        res = await sb.exec(["awk", "{print $5}", "/proc/self/mountinfo"], check=True)
        devices = [f"/dev/{d}" for d in ("full", "null", "pts", "random", "shm", "tty", "urandom", "zero")]
        expected = ["/", "/dev", *devices, "/proc", "/tmp", "/workspace"]
        assert sorted(res.stdout.split()) == sorted(expected), res.stdout  # nothing else of the host


@pytest.mark.bwrap
async def test_bwrap_starts_where_other_sandboxes_mounts_are_out_of_view(backend: BwrapBackend) -> None:
    """bwrap parses its mount table a dozen times per start: the layer store (six mounts per live sandbox)
    is unmounted where it starts, so a start costs the same with thousands live; its own paths stay."""
    from envfarm.sandbox.fork import store

    async with backend.open() as first, backend.open() as second:
        table = await asyncio.to_thread(Path(f"/proc/{handle(second).pid}/mountinfo").read_text)  # bwrap's
        points = [line.split()[4] for line in table.splitlines()]
        assert not [p for p in points if p.startswith(f"{store().root}/")], "the layer store is in view"
        assert not [p for p in points if first.id in p]
        assert len([p for p in points if p.startswith(f"{store().root}-view/")]) >= 3  # its own paths
        await second.exec("echo kept > /workspace/f", check=True)
        child = await second.fork()  # the host mounts the parent's fresh overlays: they must propagate
        await second.exec("echo after > /workspace/g", check=True)
        assert (await second.exec("cat /workspace/f /workspace/g")).stdout == "kept\nafter\n"
        assert (await child.exec("ls /workspace")).stdout == "f\n"
        await child.close()
        assert (await first.exec("ls /workspace")).stdout == ""


# ------------------------------------------------------------------------------------ shared agent pages


def agent_pid(sb: object) -> int:
    """Host pid of the sandbox's agent: the one child of the bwrap process."""
    pid = handle(sb).pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


@pytest.mark.bwrap
async def test_shared_agent_pages_leave_commands_as_they_were(rootfs: Path) -> None:
    """With shared pages the agent boots without address randomisation and with a fixed hash seed, and
    marks its memory mergeable; the commands it runs get neither setting nor its variables."""
    backend = BwrapBackend(rootfs=rootfs, share_agent_pages=True)
    probe = ("cat /proc/self/personality; env | sort; "
             "python3 -c 'import sys; print(sys.flags.hash_randomization, hash(\"envfarm\"))'")
    try:
        async with backend.open() as a, backend.open() as b:
            out = [(await sb.exec(probe, check=True)).stdout.splitlines() for sb in (a, b)]
            smaps = await asyncio.to_thread(Path(f"/proc/{agent_pid(a)}/smaps").read_text)
    finally:
        await backend.aclose()
    for lines in out:
        assert lines[0] == "00000000"  # ADDR_NO_RANDOMIZE (0x0040000) is off again
        assert not [v for v in lines if v.startswith(("PYTHONHASHSEED=", "ENVFARM_SHARE_PAGES="))]
        assert lines[-1].startswith("1 ")
    assert out[0][-1] != out[1][-1]  # each command's Python draws its own hash seed
    if KSM_KERNEL:  # a kernel without KSM refuses MADV_MERGEABLE
        assert sum(" mg" in line for line in smaps.splitlines() if line.startswith("VmFlags:")) >= 5


@pytest.mark.bwrap
async def test_shared_pages_agent_does_not_import_from_the_workspace(rootfs: Path) -> None:
    """Without ``-I`` the agent's ``-c`` would put its folder (/workspace) first on the import path; a fork
    of a sandbox whose workspace holds a planted module must boot the real one."""
    backend = BwrapBackend(rootfs=rootfs, share_agent_pages=True)
    plant = "import os\nos.makedirs('/tmp/planted', exist_ok=True)\n"
    try:
        async with backend.open() as parent:
            for name in ("binascii", "select", "_json"):
                await parent.write_file(f"/workspace/{name}.py", plant)
            child = await parent.fork()
            try:
                assert (await child.exec("echo ok; ls /tmp")).stdout == "ok\n"
            finally:
                await child.close()
    finally:
        await backend.aclose()


@pytest.mark.bwrap
async def test_pages_are_shared_only_when_asked_or_ksm_runs(rootfs: Path, monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    import envfarm.sandbox.bwrap as bwrap

    run = tmp_path / "run"
    monkeypatch.setattr(bwrap, "KSM_RUN", run)
    auto, off = BwrapBackend(rootfs=rootfs), BwrapBackend(rootfs=rootfs, share_agent_pages=False)
    assert not auto._share_pages()  # no KSM in this kernel (the file is missing)
    run.write_text("1\n")
    assert auto._share_pages() and not off._share_pages()
    run.write_text("0\n")
    assert not auto._share_pages()
    assert BwrapBackend(rootfs=rootfs, share_agent_pages=True)._share_pages()


def test_doctor_says_whether_agent_pages_are_shared(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import envfarm.commands.doctor as doctor

    def row() -> str:
        check = doctor._agent_pages()
        assert check.ok  # optional: never a missing requirement
        return check.detail

    monkeypatch.setattr(doctor, "KSM_RUN", tmp_path / "run")
    assert "no same-page merging" in row()
    (tmp_path / "run").write_text("0\n")
    monkeypatch.setattr(doctor, "ksm_running", lambda: False)
    assert row().startswith("private") and "echo 1 >" in row()
    monkeypatch.setattr(doctor, "ksm_running", lambda: True)
    assert row().startswith("shared")


@pytest.mark.bwrap
async def test_network_is_loopback_only(backend: BwrapBackend) -> None:
    async with backend.open() as sb:
        res = await sb.exec("tail -n +3 /proc/net/dev | cut -d: -f1; ls /sys/class/net 2>/dev/null || true",
                            check=True)
        assert res.stdout.split() in (["lo"], ["lo", "lo"]), res.stdout
        res = await sb.exec(["hostname"], check=True)
        assert res.stdout.strip() == "sandbox"


# ------------------------------------------------------------------------------------------------ limits


@pytest.mark.bwrap
async def test_fork_bomb_is_capped(backend: BwrapBackend) -> None:
    async with backend.open(limits=Limits(pids=64)) as sb:
        cg = handle(sb).cgroup
        before = cg.pids()
        # bash returns at once and the agent kills the tree it left; or the timeout does
        await sb.exec(["bash", "-c", ":(){ :|:& };:"], timeout_s=3)
        events = cg.dir.get("pids", cg.dirs[0]) / "pids.events"
        assert int(events.read_text().split()[-1]) > 0  # "max N": forks were refused at the limit
        assert cg.pids() == before  # nothing of the bomb is left
        res = await sb.exec(["echo", "alive"], check=True)
        assert res.stdout == "alive\n"
    host = await asyncio.create_subprocess_exec("true")
    assert await host.wait() == 0  # the host still forks


@pytest.mark.bwrap
async def test_memory_hog_is_oom_killed_and_sandbox_survives(backend: BwrapBackend) -> None:
    async with backend.open(limits=Limits(memory_mb=64)) as sb:
        res = await sb.exec(["python3", "-c", "b = b'x' * (128 << 20); print(len(b))"], timeout_s=30)
        assert res.exit_code in (-9, 137), res
        assert handle(sb).cgroup.oom_kills() >= 1
        res = await sb.exec(["echo", "alive"], check=True)
        assert res.stdout == "alive\n"


# ------------------------------------------------------------------------------------------- lifecycle


@pytest.mark.bwrap
async def test_cgroup_limits_written(backend: BwrapBackend) -> None:
    async with backend.open(limits=Limits(cpus=0.5, memory_mb=96, pids=50)) as sb:
        cg = handle(sb).cgroup
        assert cg.name.startswith(f"{os.getpid()}-")
        if cg.tree.version == 1:
            read = {"pids.max": "pids", "memory.limit_in_bytes": "memory", "cpu.cfs_quota_us": "cpu"}
            got = [(cg.dir[ctl] / f).read_text().strip() for f, ctl in read.items()]
            assert got == ["50", str(96 << 20), "50000"]
        else:
            got = [(cg.dir["unified"] / f).read_text().strip() for f in ("pids.max", "memory.max", "cpu.max")]
            assert got == ["50", str(96 << 20), "50000 100000"]


@pytest.mark.bwrap
async def test_unclosed_sandboxes_removed_at_exit(rootfs: Path) -> None:
    code = (
        "import asyncio, os\n"
        "from envfarm.sandbox.bwrap import BwrapBackend\n"
        "async def main():\n"
        f"    sb = await BwrapBackend(rootfs={str(rootfs)!r}).start()\n"
        "    print(sb._handle.cgroup.name, flush=True)\n"
        "asyncio.run(main())\n"
    )
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", code, stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    assert proc.returncode == 0
    leftover = CgroupTree().get(out.decode().strip())
    assert not any(d.exists() for d in leftover.dirs)


@pytest.mark.bwrap
async def test_cgroup_removed_on_close(backend: BwrapBackend) -> None:
    async with backend.open() as sb:
        cg = handle(sb).cgroup
        assert all(d.is_dir() for d in cg.dirs)
        await sb.exec("sleep 60 & sleep 60 & echo started")
    assert not any(d.exists() for d in cg.dirs)
    assert backend.live == 0
    await sb.close()  # idempotent


@pytest.mark.bwrap
async def test_killing_bwrap_from_outside_crashes_exec(backend: BwrapBackend) -> None:
    async with backend.open() as sb:
        pending = asyncio.ensure_future(sb.exec(["sleep", "30"]))
        await asyncio.sleep(0.3)
        os.kill(handle(sb).pid, signal.SIGKILL)
        with pytest.raises(SandboxCrashed, match="killed by signal 9"):
            async with asyncio.timeout(5):
                await pending
        assert not sb.alive
        with pytest.raises(SandboxCrashed):
            await sb.exec(["true"])
    assert not any(d.exists() for d in handle(sb).cgroup.dirs)


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _join(cgroup: Cgroup, pid: int) -> None:
    for procs in cgroup.procs_files:
        Path(procs).write_text(str(pid))


@pytest.mark.bwrap
async def test_gc_removes_cgroups_of_dead_owners(backend: BwrapBackend) -> None:
    tree = CgroupTree(backend.config.cgroup_root, backend.config.cgroup_parent)
    owner = await asyncio.create_subprocess_exec("sleep", "60")  # alive while we set up: no reaper races us
    sleeper = await asyncio.create_subprocess_exec("sleep", "60")
    orphan = tree.create(cgroup_name(owner.pid, "test-orphan"), Limits())
    mine = tree.create(cgroup_name(os.getpid(), "test-mine"), Limits())
    try:
        _join(orphan, sleeper.pid)
        owner.kill()
        await owner.wait()
        await backend.gc()  # (a concurrent test run's reaper may get there first: same outcome)
        assert not any(d.exists() for d in orphan.dirs)
        async with asyncio.timeout(5):
            assert await sleeper.wait() == -signal.SIGKILL
        assert all(d.is_dir() for d in mine.dirs)  # its owner (this process) lives
    finally:
        for proc in (owner, sleeper):
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        orphan.remove()
        mine.remove()


@pytest.mark.bwrap
async def test_backend_start_reaps_orphans(rootfs: Path) -> None:
    tree = CgroupTree()
    orphan = tree.create(cgroup_name(_dead_pid(), "test-startup"), Limits())
    try:
        BwrapBackend(rootfs=rootfs)
        assert not any(d.exists() for d in orphan.dirs)
    finally:
        orphan.remove()


# ------------------------------------------------------------------------------------ errors and config


def test_bad_options() -> None:
    with pytest.raises(ConfigError, match="known options"):
        get_backend("bwrap", rootfss="/x")
    with pytest.raises(ConfigError, match="host_uid"):
        get_backend("bwrap", host_uid=0)


@pytest.mark.bwrap
async def test_rootfs_without_mount_points(tmp_path: Path) -> None:
    b = BwrapBackend(rootfs=tmp_path)
    with pytest.raises(ImageError, match="/workspace"):
        await b.start()


@pytest.mark.bwrap
async def test_check_reports_missing_tools(rootfs: Path) -> None:
    b = BwrapBackend(rootfs=rootfs)
    b._setpriv = None
    with pytest.raises(BackendUnavailable, match=r"setpriv.*make setup"):
        await b.check()


def test_cgroup_v2_layout(tmp_path: Path) -> None:
    """On a pure v2 machine: controllers enabled in the root and envfarm, limits written to one dir."""
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("")
    tree = CgroupTree(tmp_path)
    assert tree.version == 2
    tree.parents["unified"].mkdir()
    (tree.parents["unified"] / "cgroup.subtree_control").write_text("")
    cg = tree.get("123-abc")
    cg.dir["unified"].mkdir()  # a real cgroupfs creates the interface files on mkdir; fake them
    for name in ("pids.max", "memory.max", "memory.swap.max", "cpu.max"):
        (cg.dir["unified"] / name).write_text("")
    (cg.dir["unified"] / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 2\noom_kill 1\n")
    cg.apply(Limits(cpus=0.5, memory_mb=64, pids=32))
    tree.prepare()
    read = lambda name: (cg.dir["unified"] / name).read_text()  # noqa: E731
    assert (read("pids.max"), read("memory.max"), read("memory.swap.max"), read("cpu.max")) == (
        "32", str(64 << 20), "0", "50000 100000")
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+pids +memory +cpu"
    assert (tree.parents["unified"] / "cgroup.subtree_control").read_text() == "+pids +memory +cpu"
    assert cg.procs_files == [str(cg.dir["unified"] / "cgroup.procs")]
    assert tree.names() == {"123-abc"}
    assert (cg.oom_kills(), cg.memory_failcnt()) == (1, 7)
