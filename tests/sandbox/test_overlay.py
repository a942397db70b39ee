"""The layer store behind copy-on-write forks, on the host side (root, overlayfs)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from midway import cancel_midway

from envfarm.errors import ForkError
from envfarm.sandbox import Backend
from envfarm.sandbox.overlay import MAX_DEPTH, LayerStore, PathSpec, owner_pid

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting overlays needs root")

SPECS = [PathSpec("workspace", 16, 1000, 1000, 0o755)]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LayerStore]:
    store = LayerStore(tmp_path / "layers")
    yield store
    store.gc(all_runs=True)
    while subprocess.run(["umount", "-l", str(store.root)], capture_output=True).returncode == 0:
        pass


def test_forks_share_layers_and_stay_independent(store: LayerStore) -> None:
    parent = store.create("run-1-00001", SPECS)
    ws = parent.mount_point("workspace")
    assert oct(ws.stat().st_mode & 0o7777) == "0o755" and ws.stat().st_uid == 1000
    (ws / "a").write_text("a")
    (ws / "gone").write_text("x")
    child = store.create("run-1-00002", SPECS, store.fork(parent))
    cws = child.mount_point("workspace")
    assert (cws / "a").read_text() == "a"
    (cws / "gone").unlink()  # a whiteout in the child's upper
    (cws / "c").write_text("c")
    (ws / "p").write_text("p")  # the parent's new upper, stacked over its old overlay
    assert (ws / "gone").exists() and not (ws / "c").exists()
    assert not (cws / "p").exists() and not (cws / "gone").exists()
    frozen = child.stacks["workspace"].lowers[0]
    with pytest.raises(OSError):
        (frozen.data / "x").write_text("x")  # frozen layers are read-only tmpfs
    again = store.fork(parent)  # the parent wrote p: frozen again; a clean one is not
    assert len(again["workspace"]) == 2 and store.fork(parent) == again
    store.release(child)
    store.release(parent)
    assert not any(store.layers.iterdir()) and not any(store.boxes.iterdir())
    with pytest.raises(ForkError, match="closed"):  # closed while a fork of it waited for the store
        store.fork_into(parent, "run-1-00004", SPECS)


def test_deep_stacks_are_flattened(store: LayerStore) -> None:
    sb = store.create("run-1-00003", SPECS)
    ws = sb.mount_point("workspace")
    children = []
    for i in range(MAX_DEPTH + 3):
        (ws / f"f{i}").write_text(str(i))
        if i:
            (ws / f"f{i - 1}").unlink()
        lowers = store.fork(sb)
        assert len(lowers["workspace"]) <= MAX_DEPTH
        children.append(store.create(f"run-1-{i + 10:05d}", SPECS, lowers))
    last = children[-1].mount_point("workspace")
    assert sorted(p.name for p in last.iterdir()) == [f"f{MAX_DEPTH + 2}"]
    assert sorted(p.name for p in children[0].mount_point("workspace").iterdir()) == ["f0"]
    for files in [*children, sb]:
        store.release(files)
    assert not any(store.layers.iterdir())


def test_gc_removes_what_dead_owners_left(store: LayerStore, monkeypatch: pytest.MonkeyPatch) -> None:
    dead = 2**22 + 7  # above pid_max's default: no such process
    with monkeypatch.context() as m:
        m.setattr(os, "getpid", lambda: dead)
        files = store.create(f"run-{dead:x}-00001", SPECS)
        (files.mount_point("workspace") / "a").write_text("a")
        store.fork(files)
    live = store.create("run-1-00009", SPECS)  # pid 1 is alive
    assert store.gc() == 1
    assert [p.name for p in store.boxes.iterdir()] == ["run-1-00009"]
    assert all(owner_pid(p.name, layer=True) != dead for p in store.layers.iterdir())
    store.release(live)


def test_owner_pid_parses_both_names() -> None:
    assert owner_pid("12.3", layer=True) == 12
    assert owner_pid("abc-def-1f-00002", layer=False) == 0x1F
    assert owner_pid("junk", layer=True) is None


async def test_closing_a_booting_child_frees_its_layers(isolated_backend: Backend) -> None:
    from envfarm.sandbox.fork import store

    async with isolated_backend.open() as parent:
        await parent.write_file("a.txt", "a\n")
        child = await parent.fork()
        await child.close()  # before its agent answered
        async with await parent.fork() as second, await second.fork() as grandchild:  # second still boots
            assert (await grandchild.read_file("a.txt")) == b"a\n"
    names = {p.name for p in store().boxes.iterdir()}
    assert not names & {child.id, second.id, grandchild.id}


async def test_a_start_cancelled_while_its_layers_mount_frees_them(isolated_backend: Backend,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The cancellation waits for the mount in flight, so the cleanup finds the layers and frees them."""
    from envfarm.config import run_id
    from envfarm.sandbox.fork import store

    began, ended, real_create = threading.Event(), threading.Event(), LayerStore.create

    def slow_create(self: LayerStore, *args: object) -> object:
        began.set()
        time.sleep(0.5)  # the caller is cancelled meanwhile
        try:
            return real_create(self, *args)  # type: ignore[arg-type]
        finally:
            ended.set()

    def mine() -> set[str]:  # the store is the host's: other envfarm processes keep boxes there too
        return {p.name for p in store().boxes.iterdir() if p.name.startswith(f"{run_id()}-{os.getpid():x}-")}

    monkeypatch.setattr(LayerStore, "create", slow_create)
    before = mine()
    await cancel_midway(isolated_backend.start(), began, ended)
    assert mine() <= before


async def test_gc_removes_the_layers_of_a_killed_owner() -> None:
    from envfarm.sandbox import get_backend
    from envfarm.sandbox.fork import store

    script = textwrap.dedent("""
        import asyncio, os, signal
        from envfarm.sandbox import get_backend
        async def main():
            sb = await get_backend("bwrap").start()
            await sb.write_file("a.txt", "a")
            child = await sb.fork()
            await child.exec("true")
            print(sb.id, child.id, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)   # no cleanup, no atexit
        asyncio.run(main())
    """)
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    assert proc.returncode == -9
    ids = set(out.decode().split())
    pid = owner_pid(next(iter(ids)), layer=False)
    assert len(ids) == 2 and ids <= {p.name for p in store().boxes.iterdir()}
    assert any(owner_pid(p.name, layer=True) == pid for p in store().layers.iterdir())
    backend = get_backend("bwrap")  # a new backend reaps dead owners' leftovers; gc does it again
    try:
        await backend.gc()
    finally:
        await backend.aclose()
    assert not ids & {p.name for p in store().boxes.iterdir()}
    assert not any(owner_pid(p.name, layer=True) == pid for p in store().layers.iterdir())


async def test_a_child_that_cannot_start_says_so_on_first_use(isolated_backend: Backend,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from envfarm.errors import SandboxStartError
    from envfarm.sandbox.fork import store

    async def broken(spec: object) -> None:
        raise SandboxStartError("no room")

    async with isolated_backend.open() as parent:
        monkeypatch.setattr(isolated_backend, "_open", broken)
        child = await parent.fork()
        with pytest.raises(SandboxStartError, match="no room"):
            await child.exec("true")
        await child.close()
        assert child.id not in {p.name for p in store().boxes.iterdir()}
        monkeypatch.undo()
        assert (await parent.exec("echo fine")).stdout == "fine\n"
