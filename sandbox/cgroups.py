"""A cgroup per sandbox: pids, memory and cpu limits, OOM accounting, and a teardown that kills everything.

Layout (the same for every owner process, so a reaper in another process finds leftovers):

    cgroup v1 (per-controller hierarchies)      cgroup v2 (one unified hierarchy)
    /sys/fs/cgroup/pids/envfarm/<name>          /sys/fs/cgroup/envfarm/<name>
    /sys/fs/cgroup/memory/envfarm/<name>          (+pids +memory +cpu enabled in the root's and in
    /sys/fs/cgroup/cpu/envfarm/<name>              envfarm's cgroup.subtree_control)

``<name>`` is ``<owner_pid>-<sandbox_id>``: the pid of the process that created it comes first, so
``CgroupTree.gc`` can tell leftovers of a dead owner from the cgroups of a live one. The ``envfarm`` parent
sits at the top of each hierarchy (like docker's ``/docker``) rather than under the owner's own cgroup: a
process's own cgroup changes between runs and may be removed by whoever made it, which would strand the
leftovers and block that removal.

The process to confine joins the cgroup itself (``echo $$ > cgroup.procs`` before it execs the sandbox),
so nothing it forks can escape. Writes here are a few small cgroupfs writes: cheap enough to do inline.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import re
import signal
import time
from pathlib import Path
from typing import Protocol

log = logging.getLogger(__name__)

CONTROLLERS = ("pids", "memory", "cpu")
DEFAULT_ROOT = Path("/sys/fs/cgroup")
DEFAULT_PARENT = "envfarm"
CPU_PERIOD_US = 100_000
MIN_CPU_QUOTA_US = 1_000
REMOVE_TIMEOUT_S = 5.0
_NAME_OK = re.compile(r"[^A-Za-z0-9_.-]")
_OWNER = re.compile(r"^(\d+)-")


class CgroupLimits(Protocol):
    """The fields of ``base.Limits`` a cgroup enforces."""

    @property
    def cpus(self) -> float: ...
    @property
    def memory_mb(self) -> int: ...
    @property
    def pids(self) -> int: ...


def _write(path: Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def cgroup_name(owner_pid: int, sandbox_id: str) -> str:
    """The cgroup name of one sandbox: ``<owner_pid>-<sandbox_id>`` (unsafe characters replaced)."""
    return f"{owner_pid}-{_NAME_OK.sub('_', sandbox_id)}"


def owner_of(name: str) -> int | None:
    """The owner pid encoded in a cgroup name, or None for a name envfarm did not make."""
    m = _OWNER.match(name)
    return int(m.group(1)) if m else None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class CgroupTree:
    """The ``envfarm`` parent cgroup(s) on this machine, v1 or v2, found once."""

    def __init__(self, root: Path = DEFAULT_ROOT, parent: str = DEFAULT_PARENT) -> None:
        self.root = Path(root)
        self.version = 2 if (self.root / "cgroup.controllers").exists() else 1
        if self.version == 2:
            self.parents = {"unified": self.root / parent}
        else:
            self.parents = {c: self.root / c / parent for c in CONTROLLERS}
        self._ready = False

    def __repr__(self) -> str:
        return f"<CgroupTree v{self.version} {', '.join(map(str, self.parents.values()))}>"

    def prepare(self) -> None:
        """Create the parent cgroup(s) and enable the controllers. Idempotent; raises OSError."""
        if self._ready:
            return
        if self.version == 2:
            self._prepare_v2()
        else:
            for controller, parent in self.parents.items():
                if not parent.parent.is_dir():
                    raise FileNotFoundError(errno.ENOENT, f"cgroup v1 controller {controller!r} is not "
                                            "mounted", str(parent.parent))
                parent.mkdir(exist_ok=True)
        self._ready = True

    def _prepare_v2(self) -> None:
        available = _read(self.root / "cgroup.controllers").split()
        missing = [c for c in CONTROLLERS if c not in available]
        if missing:
            raise OSError(errno.ENOTSUP, f"cgroup v2 controllers {missing} are not available",
                          str(self.root / "cgroup.controllers"))
        parent = self.parents["unified"]
        enable = " ".join(f"+{c}" for c in CONTROLLERS)
        if not set(CONTROLLERS) <= set(_read(self.root / "cgroup.subtree_control").split()):
            _write(self.root / "cgroup.subtree_control", enable)
        parent.mkdir(exist_ok=True)
        if not set(CONTROLLERS) <= set(_read(parent / "cgroup.subtree_control").split()):
            _write(parent / "cgroup.subtree_control", enable)

    def create(self, name: str, limits: CgroupLimits) -> Cgroup:
        """A fresh cgroup ``name`` with ``limits`` applied; removed again if applying them fails."""
        self.prepare()
        cg, made = Cgroup(self, name), []
        try:
            for d in cg.dirs:
                d.mkdir()  # FileExistsError for a name in use: never take over someone else's cgroup
                made.append(d)
            cg.apply(limits)
        except BaseException:
            for d in reversed(made):  # nothing has joined yet: empty dirs
                try:
                    d.rmdir()
                except OSError:
                    pass
            raise
        return cg

    def get(self, name: str) -> Cgroup:
        return Cgroup(self, name)

    def names(self) -> set[str]:
        """Names of the sandbox cgroups that exist now, in any hierarchy."""
        found: set[str] = set()
        for parent in self.parents.values():
            try:
                found.update(e.name for e in os.scandir(parent) if e.is_dir(follow_symlinks=False))
            except OSError:
                continue
        return found

    def remove_owned_by(self, pid: int) -> int:
        """Kill and remove every sandbox cgroup of owner ``pid`` (an exiting owner's last cleanup)."""
        mine = [n for n in self.names() if owner_of(n) == pid]
        return sum(self.get(n).remove(within_s=1.0) for n in mine)

    def gc(self, all_runs: bool = False) -> int:
        """Kill and remove sandbox cgroups whose owner process is gone (all of them with ``all_runs``).

        Returns how many were removed; never raises OSError."""
        removed = 0
        for name in sorted(self.names()):
            owner = owner_of(name)
            if owner is None:
                continue
            if not all_runs and pid_alive(owner):
                continue
            if self.get(name).remove():
                log.info("removed leftover sandbox cgroup %s (owner pid %d)", name, owner)
                removed += 1
        return removed


class Cgroup:
    """One sandbox's cgroup: a directory per hierarchy (v1) or one directory (v2)."""

    def __init__(self, tree: CgroupTree, name: str) -> None:
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"bad cgroup name {name!r}")
        self.tree = tree
        self.name = name
        self.dir = {key: parent / name for key, parent in tree.parents.items()}
        self.dirs = list(self.dir.values())

    def __repr__(self) -> str:
        return f"<Cgroup {self.name} v{self.tree.version}>"

    @property
    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` file of every hierarchy: write a pid to each to join."""
        return [str(d / "cgroup.procs") for d in self.dirs]

    def _ctl(self, controller: str) -> Path:
        return self.dir["unified"] if self.tree.version == 2 else self.dir[controller]

    def apply(self, limits: CgroupLimits) -> None:
        """Write the pids, memory (no swap) and cpu limits."""
        mem = str(int(limits.memory_mb) << 20)
        quota = max(MIN_CPU_QUOTA_US, int(limits.cpus * CPU_PERIOD_US))
        pids, memory, cpu = self._ctl("pids"), self._ctl("memory"), self._ctl("cpu")
        _write(pids / "pids.max", str(int(limits.pids)))
        if self.tree.version == 2:
            _write(memory / "memory.max", mem)
            if (memory / "memory.swap.max").exists():
                _write(memory / "memory.swap.max", "0")
            _write(cpu / "cpu.max", f"{quota} {CPU_PERIOD_US}")
            return
        _write(memory / "memory.limit_in_bytes", mem)
        if (memory / "memory.memsw.limit_in_bytes").exists():
            _write(memory / "memory.memsw.limit_in_bytes", mem)
        _write(cpu / "cpu.cfs_period_us", str(CPU_PERIOD_US))
        _write(cpu / "cpu.cfs_quota_us", str(quota))

    def pids(self) -> set[int]:
        """Every process in the cgroup (all hierarchies); empty once it is gone."""
        found: set[int] = set()
        for d in self.dirs:
            found.update(int(p) for p in _read(d / "cgroup.procs").split())
        return found

    def oom_kills(self) -> int:
        """How many processes the kernel OOM-killed in this cgroup so far."""
        memory = self._ctl("memory")
        name = "memory.events" if self.tree.version == 2 else "memory.oom_control"
        for line in _read(memory / name).splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def memory_failcnt(self) -> int:
        """v1: how often usage hit the memory limit (reclaim or OOM); v2: memory.events ``max``."""
        if self.tree.version == 2:
            for line in _read(self._ctl("memory") / "memory.events").splitlines():
                if line.startswith("max "):
                    return int(line.split()[1])
            return 0
        text = _read(self._ctl("memory") / "memory.failcnt").strip()
        return int(text) if text.isdigit() else 0

    def kill(self) -> None:
        """SIGKILL every process in the cgroup now (one pass; a process forked meanwhile may survive it)."""
        if self.tree.version == 2:
            try:
                _write(self.dir["unified"] / "cgroup.kill", "1")  # kernel >= 5.14; the loop below otherwise
            except OSError:
                pass
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def sweep(self) -> bool:
        """One pass: SIGKILL what is left inside, then rmdir what is empty. True once every dir is gone."""
        self.kill()
        gone = True
        for d in self.dirs:
            try:
                d.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                gone = False
        return gone

    def remove(self, within_s: float = REMOVE_TIMEOUT_S) -> bool:
        """Kill everything inside and delete the cgroup. Idempotent; never raises; False on timeout."""
        deadline, delay = time.monotonic() + within_s, 0.0005
        while not self.sweep():
            if time.monotonic() > deadline:
                return self._give_up(within_s)
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        return True

    async def aremove(self, within_s: float = REMOVE_TIMEOUT_S) -> bool:
        """``remove`` for async code: waits between passes without blocking the event loop."""
        deadline, delay = time.monotonic() + within_s, 0.0005
        while not self.sweep():
            if time.monotonic() > deadline:
                return self._give_up(within_s)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)
        return True

    def _give_up(self, within_s: float) -> bool:
        log.warning("%s: still busy after %.0fs (pids %s); leaving it for gc", self, within_s,
                    sorted(self.pids())[:10])
        return False


__all__ = ["CONTROLLERS", "Cgroup", "CgroupLimits", "CgroupTree", "cgroup_name", "owner_of", "pid_alive"]
