"""Exec and file semantics, the same on every backend."""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest

from envfarm.errors import ExecFailed, ExecTimeout, SandboxFileError
from envfarm.sandbox import Backend, Limits, get_backend


async def test_exit_codes_and_streams(any_backend: Backend) -> None:
    async with any_backend.open() as sb:
        res = await sb.exec("echo out; echo err >&2; exit 3")
        assert (res.exit_code, res.stdout, res.stderr) == (3, "out\n", "err\n")
        assert not res.timed_out and not res.truncated and res.duration > 0
        assert (await sb.exec(["bash", "-c", "kill -9 $$"])).exit_code == -9
        missing = await sb.exec(["no-such-program-xyz"])
        assert missing.exit_code == 127 and "no-such-program-xyz" in missing.stderr


async def test_stdin_is_empty_and_commands_do_not_hang(any_backend: Backend) -> None:
    async with any_backend.open() as sb:
        res = await sb.exec("cat; read line; echo rc=$?", timeout_s=5)
        assert res.stdout == "rc=1\n" and not res.timed_out


async def test_unicode_env_and_cwd(any_backend: Backend) -> None:
    async with any_backend.open() as sb:
        text = "héllo ✓ 日本語 🚀"
        res = await sb.exec(["printf", "%s", text])
        assert res.stdout == text
        assert (await sb.exec("printf '\\xff\\xfeok'")).stdout == "\ufffd\ufffdok"
        res = await sb.exec("echo $GREETING; pwd", env={"GREETING": text}, cwd="/tmp")
        assert res.stdout == f"{text}\n/tmp\n"
        assert (await sb.exec("pwd")).stdout.strip() == sb.workdir
        bad = await sb.exec("true", cwd="/no/such/dir")
        assert bad.exit_code == 127 and "/no/such/dir" in bad.stderr


async def test_timeout_kills_the_whole_tree(any_backend: Backend) -> None:
    marker = f"{os.getpid() % 1000}.{time.time_ns() % 10**6}"
    async with any_backend.open() as sb:
        script = f"sleep 1{marker} & setsid sleep 2{marker} & sleep 3{marker}"
        t0 = time.perf_counter()
        res = await sb.exec(script, timeout_s=0.5)
        assert res.timed_out and res.exit_code == -9
        assert time.perf_counter() - t0 < 5
        ps = await sb.exec(["ps", "-eo", "args"])
        assert marker not in ps.stdout, ps.stdout
        with pytest.raises(ExecTimeout):
            await sb.exec("sleep 5", timeout_s=0.2, check=True)
        with pytest.raises(ExecFailed, match="exited 4"):
            await sb.exec("exit 4", check=True)


async def test_background_processes_die_with_their_command(any_backend: Backend) -> None:
    async with any_backend.open() as sb:
        nap = f"sleep 30.{os.getpid()}{random.randrange(10**6):06d}"  # unique: local sees the host
        res = await sb.exec(f"({nap}; echo late) & echo now", timeout_s=10)
        assert res.stdout == "now\n" and res.duration < 5
        assert nap not in (await sb.exec(["ps", "-eo", "args"])).stdout


async def test_output_is_capped(any_backend: Backend) -> None:
    async with any_backend.open(limits=Limits(output_bytes=4096)) as sb:
        res = await sb.exec("head -c 300000000 /dev/zero | tr '\\0' a; echo done >&2", timeout_s=60)
        assert res.truncated and res.exit_code == 0
        assert res.stdout == "a" * 4096 and res.stderr == "done\n"
        assert (await sb.exec("echo alive")).stdout == "alive\n"


async def test_files_roundtrip(any_backend: Backend, tmp_path: Path) -> None:
    blob = os.urandom(9 << 20)  # crosses the 4 MiB transfer chunk twice
    async with any_backend.open() as sb:
        await sb.write_file("data/blob.bin", blob)
        assert await sb.read_file("data/blob.bin") == blob
        digest = (await sb.exec("sha256sum data/blob.bin")).stdout.split()[0]
        assert digest == hashlib.sha256(blob).hexdigest()
        await sb.write_file("/tmp/u.txt", "ünïcode\n")
        assert (await sb.exec("cat /tmp/u.txt")).stdout == "ünïcode\n"
        with pytest.raises(SandboxFileError) as err:
            await sb.read_file("/no/such/file")
        assert err.value.errno == 2 and isinstance(err.value, OSError)


async def test_upload_and_download_folders(any_backend: Backend, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "pkg" / "sub").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("print('a')\n")
    big = os.urandom(20 << 20)
    (src / "pkg" / "sub" / "big.bin").write_bytes(big)
    (src / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (src / "run.sh").chmod(0o755)
    async with any_backend.open() as sb:
        await sb.upload(src, "repo")
        assert (await sb.exec("./run.sh", cwd=f"{sb.workdir}/repo")).stdout == "ran\n"
        assert (await sb.exec("python3 pkg/a.py", cwd=f"{sb.workdir}/repo")).stdout == "a\n"
        await sb.exec("echo new > repo/pkg/made_inside.txt", check=True)
        out = await sb.download("repo", tmp_path / "back")
    assert out == tmp_path / "back" / "repo"
    assert (out / "pkg" / "sub" / "big.bin").read_bytes() == big
    assert (out / "pkg" / "made_inside.txt").read_text() == "new\n"


async def test_calls_are_serialised_and_cancellation_recovers(any_backend: Backend) -> None:
    async with any_backend.open() as sb:
        results = await asyncio.gather(*(sb.exec(f"echo {i}") for i in range(20)))
        assert [r.stdout for r in results] == [f"{i}\n" for i in range(20)]
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(sb.exec("sleep 20"), 0.3)
        t0 = time.perf_counter()
        assert (await sb.exec("echo next")).stdout == "next\n"
        assert time.perf_counter() - t0 < 5, "a cancelled command must be killed, not waited for"
        assert sb.alive


async def test_sandbox_ids_differ_across_forked_processes() -> None:
    """Forked workers (AsyncVectorEnv, multiprocessing) inherit the run id and a copy of the counter."""
    import multiprocessing

    from envfarm.config import run_id
    from envfarm.sandbox import get_backend

    run_id()  # cached before the fork, as in a real parent that already started sandboxes
    backend = get_backend("local")
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    workers = [ctx.Process(target=_put_first_id, args=(backend, queue)) for _ in range(2)]
    for w in workers:
        w.start()
    ids = [queue.get(timeout=30) for _ in workers]
    for w in workers:
        w.join(timeout=30)
    assert len(set(ids)) == 2, ids
    assert backend._new_id() not in ids


async def test_two_backends_of_one_process_never_share_a_sandbox_id() -> None:
    """Docker names containers by id: a mining backend and a harness backend once clashed (409)."""
    from envfarm.sandbox import get_backend

    a, b = get_backend("local"), get_backend("local")
    async with a.open() as sa, b.open() as sb:
        assert sa.id != sb.id
    ids = [a._new_id(), b._new_id(), a._new_id()]
    assert len(set(ids)) == 3, ids


def _put_first_id(backend: Backend, queue: Any) -> None:
    queue.put(backend._new_id())


async def test_timeout_is_a_deprecated_spelling_of_timeout_s() -> None:
    backend = get_backend("local")
    try:
        async with backend.open() as sb:
            with pytest.warns(DeprecationWarning, match="timeout_s="):
                res = await sb.exec("sleep 5", timeout=0.3)
            assert res.timed_out and res.duration < 3
    finally:
        await backend.aclose()
