"""``Sandbox.fork`` on bwrap and docker: copy-on-write writable paths, and a child that boots meanwhile.

The writable paths of a sandbox on these backends (``/workspace``, ``/tmp``, ``/dev/shm``; the root is
read-only) are overlays the host mounts in the layer store and binds into the sandbox (``overlay.py``),
except ``/dev/shm``, a tmpfs of its own that a fork copies (glibc before 2.34 finds POSIX semaphores only
on a tmpfs there: ``multiprocessing`` locks fail on an overlay).
A fork, with the parent's command lock held (so between two commands, a consistent snapshot):

1. freezes what the parent wrote since its last fork: its upper tmpfs is remounted read-only and becomes
   the newest lower layer, and the parent gets a fresh upper over the same layers, mounted over its old
   overlay on the host and propagated into the running sandbox (the store is a shared mount, the
   sandbox's bind a slave). A parent that wrote nothing since its last fork is left as it is;
2. mounts the child's overlays: the same frozen layers, a fresh empty upper each;
3. starts the child's process tree in the background (``Backend.start`` without waiting): ``fork()``
   returns then, and the child's first call waits for its agent.

Costs: a fork copies nothing but /dev/shm's files (a stack deeper than ``overlay.MAX_DEPTH`` layers is
flattened once); a child costs what it writes, bounded by its own uppers (``Limits.disk_mb`` each for
/workspace and /tmp, ``shm_mb`` for /dev/shm) while the frozen layers are shared. Writes, deletions
(whiteouts) and permission changes stay in the upper of the sandbox that made them. Processes are not
copied: the child's agent is fresh, background processes of the parent do not exist in it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar

from envfarm import config
from envfarm.errors import ForkError, SandboxStartError

from .overlay import Files, LayerStore, PathSpec
from .threads import to_the_end
from .values import PARENT_LABEL

if TYPE_CHECKING:
    from .base import SandboxSpec

T = TypeVar("T")

log = logging.getLogger(__name__)

WRITABLE = {"workspace": "/workspace", "tmp": "/tmp", "shm": "/dev/shm"}
"""Store name -> path inside the sandbox, of every writable path."""


_mounts: ThreadPoolExecutor | None = None
"""The store's blocking work runs here, not in the default executor: mount calls take a millisecond and
must not queue behind the docker API calls of children booting meanwhile. Made anew in a forked process
(its threads do not survive a fork)."""


async def _in_thread(fn: Callable[..., T], *args: Any) -> T:
    global _mounts
    if _mounts is None:
        _mounts = ThreadPoolExecutor(max_workers=2, thread_name_prefix="envfarm-layers")
    return await to_the_end(fn, *args, executor=_mounts)  # a cancelled caller's cleanup sees what fn made


def _after_fork_in_child() -> None:
    """A forked process (a vector env's worker) has no thread of ours and owns none of our layers."""
    global _mounts
    _mounts = None
    store.cache_clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


@cache
def store() -> LayerStore:
    """The layer store of this host (one per process; entries carry their owner pid)."""
    return LayerStore(config.home() / "layers")


def path_specs(disk_mb: int, shm_mb: int, agent: int, root: int) -> list[PathSpec]:
    """The writable paths as the host sees them: ``agent``/``root`` are the host uids of uid 1000 / 0."""
    return [PathSpec("workspace", disk_mb, agent, agent, 0o755),
            PathSpec("tmp", disk_mb, root, root, 0o1777),
            PathSpec("shm", shm_mb, root, root, 0o1777, copied=True)]


class CowFiles:
    """The writable paths of one backend's sandboxes, by sandbox id."""

    def __init__(self) -> None:
        self._files: dict[str, Files] = {}

    def mounts(self, sandbox_id: str) -> dict[str, str]:
        """Host path -> sandbox path of a sandbox's overlays."""
        files = self._files[sandbox_id]
        return {str(files.mount_point(name)): WRITABLE[name] for name in files.stacks}

    async def create(self, spec: SandboxSpec, backend: str, specs: Callable[[], list[PathSpec]]) -> None:
        """Fresh overlays for an opened sandbox; a forked one has them already."""
        sandbox_id = spec.sandbox_id
        if sandbox_id in self._files:
            return
        try:
            about = meta(spec, backend)
            await _in_thread(self._keep, sandbox_id, store().create, sandbox_id, specs(), None, about)
        except OSError as e:
            raise SandboxStartError(f"sandbox {sandbox_id}: cannot mount its writable paths: {e}; run "
                                    "`envfarm sandbox gc` if leftovers pile up") from e

    async def fork(self, parent_id: str, child: SandboxSpec, backend: str,
                   specs: Callable[[], list[PathSpec]]) -> None:
        """Freeze the parent's writes and mount the child's overlays over the same layers."""
        parent, child_id = self._files.get(parent_id), child.sandbox_id
        if parent is None:
            raise ForkError(f"sandbox {parent_id} has no writable paths of envfarm's to fork")
        try:
            about = meta(child, backend)
            await _in_thread(self._keep, child_id, store().fork_into, parent, child_id, specs(), about)
        except OSError as e:
            raise ForkError(f"forking sandbox {parent_id}: {e}") from e

    def _keep(self, sandbox_id: str, make: Callable[..., Files], *args: Any) -> None:
        """Make a sandbox's files and keep them, in the store's thread: a caller cancelled meanwhile still
        finds them to release."""
        self._files[sandbox_id] = make(*args)

    async def release(self, sandbox_id: str) -> None:
        """Unmount a sandbox's overlays and drop its layers (once it is dead). Idempotent."""
        files = self._files.pop(sandbox_id, None)
        if files is not None:
            await _in_thread(store().release, files)


def meta(spec: SandboxSpec, backend: str) -> dict[str, str]:
    """What ``envfarm sandbox list`` shows of a sandbox from the store."""
    return {"backend": backend, "image": spec.image or "", "parent": spec.labels.get(PARENT_LABEL, ""),
            **config.owner()}


async def gc(all_runs: bool) -> int:
    """Remove overlays and layers of dead owners from the store; how many sandboxes' folders went."""
    try:
        return await _in_thread(store().gc, all_runs)
    except OSError as e:
        log.warning("layer store gc skipped: %s", e)
        return 0


__all__ = ["WRITABLE", "CowFiles", "gc", "path_specs", "store"]
