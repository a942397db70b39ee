"""The ``bwrap`` backend: bubblewrap namespaces on a read-only Debian rootfs, one cgroup per sandbox.

One sandbox is one process tree, started like this (the host runs as root):

    /bin/sh -c JOIN_SCRIPT ...            root: join the sandbox cgroup; ulimit -c 0, -f <disk_mb + 1 MiB>,
                                          -n <open_files>
      exec setpriv --reuid=U ...          drop to the dedicated unprivileged host uid U, no caps at all
        exec bwrap --unshare-all ...      user/pid/net/ipc/uts/cgroup namespaces, read-only rootfs at /,
                                          the seccomp filter (--seccomp FD)
          python3 -I -c AGENT             uid 1000 inside (= U outside), in /workspace

Isolation: the host paths inside are the rootfs, read-only, and the sandbox's own writable paths:
/workspace and /tmp are overlays in envfarm's layer store whose upper layers are tmpfs of
``Limits.disk_mb`` each, and /dev/shm a tmpfs of ``Limits.shm_mb`` there, bound nosuid/nodev
(``sandbox/fork.py``: they make forks copy-on-write); /dev holds bwrap's minimal device set,
read-only; only ``lo`` exists; no capabilities, no_new_privs, no nested user namespaces; no /sys at all (a
bind of the host's would leak it); Docker's default seccomp denials (``sandbox/seccomp.py``: keyrings,
bpf, perf, io_uring, mounts, modules, new namespaces, ...; EPERM). pids, memory (no swap) and cpu come from
the cgroup (``sandbox/cgroups.py``), which the process joins before it execs anything, so nothing escapes
it.

Shared agent pages (``BwrapConfig.share_agent_pages``; by default where the host runs ksmd): bwrap starts
under ``setarch -R`` and the agent with a fixed hash seed, so every agent of an image boots into the same
bytes at the same addresses and offers them to the kernel's same-page merging; an idle sandbox then holds
under 2 MiB instead of ~4 (1.9 MiB with 5,000 live: ``bench/sandbox.py --live-only``). The agent turns
address randomisation back on, and drops the seed, for every command it runs. Merging has a known side
channel: a process can time a write to tell whether a page of its own was merged, so it can test a guess
of a whole page of another sandbox's agent (its code, and the requests passing through it). That is why
the backend follows the host's choice to run ksmd rather than turning it on.

Why a dedicated host uid: bwrap run by root maps uid 1000 inside to host uid 0 (no capabilities, but still
root on every file and process check). Run by an unprivileged uid it uses an unprivileged user namespace
instead, so an escape lands as a nobody. The uid must be used by nothing else on the host: whoever holds
it owns every sandbox's user namespace. The default, 66536 (65536 + the agent uid 1000), lies where no one
allocates: above login.defs' UID_MAX (60000), systemd's dynamic (61184-65519) and nobody (65534), and below
shadow's first subordinate range (SUB_UID_MIN 100000, where /etc/subuid maps rootless containers) and
systemd-nspawn's container ranges (from 524288). ``check()`` refuses a uid that names a user.

The rootfs must be reachable by that uid (every parent folder o+x): /root is 0700, so keep it outside
(``config.home()`` is /var/lib/envfarm for root). ``check_rootfs`` says so before bwrap would fail.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import pwd
import shutil
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from envfarm.config import AGENT_HOME, AGENT_UID
from envfarm.errors import BackendUnavailable, ConfigError, ImageError, SandboxStartError, tail

from .agent_io import SHARE_PAGES_ENV, ProcessPipe, agent_argv, spawn_agent
from .base import Backend, Handle, Limits, Sandbox, SandboxSpec
from .cgroups import DEFAULT_PARENT, DEFAULT_ROOT, Cgroup, CgroupTree, cgroup_name
from .fork import CowFiles, path_specs, store
from .fork import gc as gc_layers
from .overlay import PathSpec
from .seccomp import ensure_filter, seccomp_fd

log = logging.getLogger(__name__)

DEFAULT_HOST_UID = 65536 + AGENT_UID
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HOST_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
MOUNT_POINTS = ("workspace", "tmp", "proc", "dev")  # must exist: a read-only root cannot grow them
JOIN_FAILED = 125
SMOKE_TIMEOUT_S = 20.0
FIX = "run `make setup`"
KSM_RUN = Path("/sys/kernel/mm/ksm/run")

# Runs as root in the new child, before anything else: $1 = number of cgroup.procs files, then the files,
# then the file-size cap in 512-byte blocks (POSIX sh units), the open-files cap, then the command to exec.
JOIN_SCRIPT = r"""n=$1; shift
while [ "$n" -gt 0 ]; do
  echo $$ > "$1" || { echo "envfarm: cannot join cgroup $1" >&2; exit 125; }
  shift; n=$((n - 1))
done
ulimit -c 0 && ulimit -f "$1" && ulimit -n "$2" || { echo "envfarm: cannot set rlimits" >&2; exit 125; }
shift 2
exec "$@"
"""

# Runs as root in a mount namespace of its own that is a slave of the host's (``unshare --mount
# --propagation slave``): mounts the host makes later, such as a fork's new overlays, still propagate in,
# and nothing done here propagates out. $1 = the layer store, $2 = this sandbox's folder in it, $3 = where
# to show that folder instead; then the command to exec. Why: bwrap reads /proc/self/mountinfo about a dozen
# times while it sets a sandbox up, and every live sandbox adds six mounts to the host's table (three tmpfs
# layers, three overlays); with the store in view, each start would cost time in proportion to the
# sandboxes already live (a 1,000th sandbox already spent half a second of CPU there).
HIDE_SCRIPT = r"""mount --rbind "$2" "$3" && umount --lazy "$1" || {
  echo "envfarm: cannot hide the layer store $1" >&2; exit 125; }
shift 3
exec "$@"
"""


@dataclass(frozen=True, kw_only=True)
class BwrapConfig:
    """Options of the bwrap backend: ``get_backend("bwrap", **options)``."""

    rootfs: Path | None = None
    """Root filesystem folder for every sandbox; None: ``envfarm.sandbox.images.rootfs_for(image)``."""
    host_uid: int = DEFAULT_HOST_UID
    """Unprivileged host uid (and gid) that runs bwrap; dedicated to sandboxes (see the module docstring)."""
    cgroup_root: Path = DEFAULT_ROOT
    """Where the cgroup hierarchies are mounted."""
    cgroup_parent: str = DEFAULT_PARENT
    """Parent cgroup of all sandboxes, at the top of each hierarchy."""
    python: str = "python3"
    """Python interpreter inside the rootfs that runs the agent."""
    path: str = SANDBOX_PATH
    """PATH inside the sandbox."""
    share_agent_pages: bool | None = None
    """Agents boot alike and offer their pages to the kernel's same-page merging (``agent.share_pages``):
    with ksmd running, an idle sandbox holds under 2 MiB instead of ~4. None: when the host runs ksmd
    (``KSM_RUN`` reads 1) at the sandbox's start."""

    def __post_init__(self) -> None:
        if self.host_uid <= 0 or self.host_uid >= 2**32 - 1:
            raise ConfigError(f"bwrap host_uid must be an unprivileged uid, got {self.host_uid}")
        if not self.cgroup_parent or "/" in self.cgroup_parent or self.cgroup_parent in (".", ".."):
            raise ConfigError(f"bwrap cgroup_parent must be one folder name, got {self.cgroup_parent!r}")


def bwrap_args(rootfs: Path, limits: Limits, command: Sequence[str], path: str = SANDBOX_PATH,
               seccomp_fd: int | None = None, binds: Mapping[str, str] | None = None,
               env: Mapping[str, str] | None = None) -> list[str]:
    """bwrap options for one sandbox, ending in ``command``; ``seccomp_fd``: the BPF program to load;
    ``binds``: host folder -> writable path inside (the overlays of ``sandbox/fork.py``), instead of the
    size-capped tmpfs each writable path gets without; ``env``: more variables for ``command``."""
    uid = str(AGENT_UID)
    setenv = [arg for name, value in (env or {}).items() for arg in ("--setenv", name, value)]
    seccomp = [] if seccomp_fd is None else ["--seccomp", str(seccomp_fd)]
    disk, shm = str(limits.disk_mb << 20), str(limits.shm_mb << 20)
    writable = {"/dev/shm": ["--perms", "01777", "--size", shm, "--tmpfs", "/dev/shm"],
                "/workspace": ["--perms", "0755", "--size", disk, "--tmpfs", "/workspace"],
                "/tmp": ["--perms", "01777", "--size", disk, "--tmpfs", "/tmp"]}
    for host, inside in (binds or {}).items():
        writable[inside] = ["--bind", host, inside]
    return [
        "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
        *seccomp,
        "--as-pid-1",  # the agent is PID 1: signals from commands inside cannot reach it
        "--cap-drop", "ALL", "--clearenv",
        "--ro-bind", str(rootfs), "/",
        "--proc", "/proc",
        "--dev", "/dev",
        *writable["/dev/shm"],
        "--remount-ro", "/dev",
        *writable["/workspace"],
        *writable["/tmp"],
        "--uid", uid, "--gid", uid, "--hostname", "sandbox", "--chdir", AGENT_HOME,
        "--setenv", "PATH", path, "--setenv", "HOME", AGENT_HOME, "--setenv", "LANG", "C.UTF-8", *setenv,
        "--", *command,
    ]  # fmt: skip


def host_argv(setpriv: str, bwrap: str, host_uid: int, procs_files: Sequence[str], limits: Limits,
              args: Sequence[str], hide: Sequence[str] = (), setarch: str | None = None) -> list[str]:
    """The full host command: join the cgroup and set rlimits as root, drop to ``host_uid``, exec bwrap.

    ``hide``: ``unshare``, the layer store, the sandbox's folder in it and the folder to show it at: bwrap
    then starts where the store is unmounted and the sandbox's own folder shown instead (``HIDE_SCRIPT``).
    ``setarch``: its path, to start bwrap and the agent without address randomisation (the agent turns it
    back on for what it runs: ``agent.share_pages``)."""
    # one MiB above the tmpfs size, so a full tmpfs answers ENOSPC (an error a program can handle) before
    # the cap's SIGXFSZ; the cap is a backstop for any writable place without a size of its own
    fsize_blocks = str((limits.disk_mb + 1) * 2048)  # 512-byte blocks
    drop = [setpriv, f"--reuid={host_uid}", f"--regid={host_uid}", "--clear-groups", "--inh-caps=-all",
            "--bounding-set=-all", "--nnp", "--"]
    hiding = []
    if hide:
        unshare, *folders = hide
        hiding = [unshare, "--mount", "--propagation", "slave", "--", "/bin/sh", "-c", HIDE_SCRIPT,
                  "envfarm-hide", *folders]
    return ["/bin/sh", "-c", JOIN_SCRIPT, "envfarm-sandbox", str(len(procs_files)), *procs_files,
            fsize_blocks, str(limits.open_files), *hiding, *drop, *([setarch, "-R"] if setarch else []),
            bwrap, *args]


def ksm_running() -> bool:
    """Whether the host's ksmd merges pages (``KSM_RUN`` reads 1); False where the kernel has no KSM."""
    try:
        return KSM_RUN.read_text().strip() == "1"
    except OSError:
        return False


def check_rootfs(rootfs: Path, host_uid: int) -> Path:
    """``rootfs`` resolved, after checking it has the mount points and ``host_uid`` can reach it."""
    root = rootfs.resolve()
    if not root.is_dir():
        raise ImageError(f"bwrap rootfs {root} is not a folder; run `envfarm images build`")
    missing = ", ".join(f"/{m}" for m in MOUNT_POINTS if not (root / m).is_dir())
    if missing:
        raise ImageError(f"bwrap rootfs {root} lacks the mount point(s) {missing}; "
                         "rebuild it with `envfarm images build` (or mkdir them)")
    for folder in (*reversed(root.parents), root):
        st = folder.stat()
        owner, group = st.st_uid == host_uid, st.st_gid == host_uid
        bit = stat.S_IXUSR if owner else stat.S_IXGRP if group else stat.S_IXOTH
        if not st.st_mode & bit:
            raise ImageError(f"bwrap rootfs {root} is not reachable by the sandbox host uid {host_uid}: "
                             f"{folder} is mode {stat.S_IMODE(st.st_mode):04o}; keep rootfs folders (and "
                             "ENVFARM_HOME) outside /root, or `chmod o+x` that folder")
    return root


def describe_exit(code: int | None) -> str:
    if code is None:
        return "bwrap is still running"
    if code == JOIN_FAILED:
        return "the sandbox could not join its cgroup or set its rlimits (exit 125)"
    if code < 0:
        return f"bwrap was killed by signal {-code} from outside the sandbox"
    if code > 128:
        return f"the agent was killed by signal {code - 128} (bwrap exit {code})"
    return f"bwrap exited {code}"


class BwrapHandle(Handle):
    """One live bwrap sandbox: the pipe to its agent and its cgroup."""

    pipe: ProcessPipe

    def __init__(self, pipe: ProcessPipe, cgroup: Cgroup, limits: Limits, files: CowFiles,
                 sandbox_id: str) -> None:
        self.pipe = pipe
        self.cgroup = cgroup
        self.limits = limits
        self.files = files
        self.sandbox_id = sandbox_id

    @property
    def pid(self) -> int:
        """Host pid of the outer bwrap process."""
        return self.pipe.proc.pid

    async def destroy(self) -> None:
        try:
            # SIGKILL the whole tree before the pipe closes: an agent that saw its stdin close would cancel
            # the command in flight and answer, and a caller waiting on that exec would get a result
            # instead of SandboxCrashed / LeaseExpired
            self.cgroup.kill()
            await self.pipe.close()
        finally:
            try:
                await self.cgroup.aremove()  # whatever outlived the first pass, then the cgroup dirs
            finally:
                await self.files.release(self.sandbox_id)

    async def death_reason(self) -> str:
        proc = self.pipe.proc
        if proc.returncode is None:
            try:
                async with asyncio.timeout(1):
                    await proc.wait()
            except TimeoutError:
                pass
        await self.pipe.collect_stderr()
        parts = [describe_exit(proc.returncode)]
        ooms, mb = self.cgroup.oom_kills(), self.limits.memory_mb
        if ooms:
            parts.append(f"the memory cgroup OOM-killed {ooms} process(es) (memory_mb={mb})")
        elif failcnt := self.cgroup.memory_failcnt():
            parts.append(f"memory use hit the cgroup limit {failcnt} time(s) (memory_mb={mb})")
        err = tail(self.pipe.stderr_tail())
        if err:
            parts.append(f"stderr tail:\n{err}")
        return "; ".join(parts)


class BwrapBackend(Backend):
    """bubblewrap sandboxes on a read-only rootfs, run by an unprivileged host uid in per-sandbox cgroups."""

    name = "bwrap"

    def __init__(self, **options: object) -> None:
        super().__init__()
        try:
            self.config = BwrapConfig(**options)  # type: ignore[arg-type]
        except TypeError as e:
            known = ", ".join(f.name for f in fields(BwrapConfig))
            raise ConfigError(f"bad bwrap backend option ({e}); known options: {known}") from e
        self._bwrap = shutil.which("bwrap", path=HOST_ENV["PATH"])
        self._setpriv = shutil.which("setpriv", path=HOST_ENV["PATH"])
        self._unshare = shutil.which("unshare", path=HOST_ENV["PATH"])  # util-linux, like setpriv
        self._setarch = shutil.which("setarch", path=HOST_ENV["PATH"])
        self._view: Path | None = None
        self._tree = CgroupTree(Path(self.config.cgroup_root), self.config.cgroup_parent)
        self._rootfs: dict[str | None, Path] = {}
        self._files = CowFiles()
        self._reap_orphans()
        _cleanup_at_exit(self._tree)

    def _reap_orphans(self) -> None:
        """Remove cgroups left by envfarm processes that died (their sandboxes died with them)."""
        try:
            n = self._tree.gc(all_runs=False)
            store().gc(all_runs=False)  # and their writable paths
        except OSError as e:
            log.debug("bwrap: orphan reaper skipped: %s", e)
            return
        if n:
            log.info("bwrap: removed %d leftover sandbox cgroup(s) of dead owners", n)

    async def gc(self, all_runs: bool = False) -> int:
        """Kill and remove leftover sandbox cgroups of dead owners (of every owner with ``all_runs``).

        Async like the docker backend's (the CLI awaits it); the kill loops run in a thread."""
        removed = await asyncio.to_thread(self._tree.gc, all_runs)
        await gc_layers(all_runs)  # the writable paths of sandboxes whose owner died (docker's too)
        return removed

    # ------------------------------------------------------------------------------------------- checks

    async def check(self) -> None:
        missing = [n for n, p in (("bwrap", self._bwrap), ("setpriv", self._setpriv)) if p is None]
        if missing:
            raise BackendUnavailable(f"bwrap backend: {' and '.join(missing)} not found on "
                                     f"{HOST_ENV['PATH']} (apt-get install bubblewrap util-linux)", FIX)
        if os.geteuid() != 0:
            raise BackendUnavailable("bwrap backend: needs root on the host to create cgroups and switch to "
                                     f"the sandbox uid (running as uid {os.geteuid()})", FIX)
        if _read_int("/proc/sys/user/max_user_namespaces") == 0:
            raise BackendUnavailable("bwrap backend: user namespaces are disabled "
                                     "(sysctl user.max_user_namespaces=0)", FIX)
        self._check_host_uid()
        await asyncio.to_thread(ensure_filter)  # once per process; BackendUnavailable without libseccomp
        self._prepare_cgroups()
        rootfs = await self._resolve_rootfs(None)
        await self._smoke(rootfs)

    def _check_host_uid(self) -> None:
        uid = self.config.host_uid
        try:
            user = pwd.getpwuid(uid).pw_name
        except KeyError:
            user = None
        if user is not None:
            raise BackendUnavailable(f"bwrap backend: host_uid {uid} belongs to user {user!r}; sandboxes "
                                     "need a uid nothing else uses", "pass host_uid=<an unused uid>")
        for line in _read_text("/etc/subuid").splitlines():
            name, _, rest = line.partition(":")
            start, _, count = rest.partition(":")
            if start.isdigit() and count.isdigit() and int(start) <= uid < int(start) + int(count):
                log.warning("bwrap host_uid %d lies in %s's subordinate uid range: pick another", uid, name)

    def _prepare_cgroups(self) -> None:
        try:
            self._tree.prepare()
        except OSError as e:
            raise BackendUnavailable(f"bwrap backend: cannot set up cgroups in {self._tree}: {e}", FIX) from e

    async def _smoke(self, rootfs: Path) -> None:
        """Run ``python3 -c pass`` in a throwaway sandbox without a cgroup: proves userns, uid and rootfs."""
        assert self._setpriv and self._bwrap
        filter_fd = seccomp_fd()
        args = bwrap_args(rootfs, Limits(), [self.config.python, "-c", "pass"], self.config.path, filter_fd)
        argv = host_argv(self._setpriv, self._bwrap, self.config.host_uid, [], Limits(), args)
        what = f"bwrap backend: a test sandbox on {rootfs}"
        try:
            proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                        stdout=asyncio.subprocess.DEVNULL,
                                                        stderr=asyncio.subprocess.PIPE, env=HOST_ENV, cwd="/",
                                                        pass_fds=(filter_fd,))
        except OSError as e:
            raise BackendUnavailable(f"{what} did not spawn: {e}", FIX) from e
        finally:
            os.close(filter_fd)
        try:
            async with asyncio.timeout(SMOKE_TIMEOUT_S):
                _, err = await proc.communicate()
        except TimeoutError as e:
            raise BackendUnavailable(f"{what} did not finish in {SMOKE_TIMEOUT_S:.0f}s", FIX) from e
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        if proc.returncode != 0:
            stderr = tail(err.decode(errors="replace"))
            raise BackendUnavailable(f"{what} failed ({proc.returncode}): {stderr}",
                                     f"{FIX}; check that unprivileged user namespaces are allowed")

    # ------------------------------------------------------------------------------------------- start

    async def _resolve_rootfs(self, image: str | None) -> Path:
        key = None if self.config.rootfs is not None else image
        if key not in self._rootfs:
            self._rootfs[key] = await asyncio.to_thread(self._find_rootfs, image)
        return self._rootfs[key]

    def _find_rootfs(self, image: str | None) -> Path:
        if self.config.rootfs is not None:
            if image:
                log.debug("bwrap backend has a fixed rootfs; image %r ignored", image)
            return check_rootfs(Path(self.config.rootfs), self.config.host_uid)
        from .images import rootfs_for  # lazy: the image code is only needed without an explicit rootfs

        return check_rootfs(Path(rootfs_for(image)), self.config.host_uid)

    async def _open(self, spec: SandboxSpec) -> Handle:
        try:
            return await self._open_tree(spec)
        except BaseException:
            await asyncio.shield(self._files.release(spec.sandbox_id))
            raise

    async def _open_tree(self, spec: SandboxSpec) -> Handle:
        if self._bwrap is None or self._setpriv is None:
            await self.check()  # raises BackendUnavailable naming what is missing
        assert self._bwrap and self._setpriv
        rootfs = await self._resolve_rootfs(spec.image)
        self._prepare_cgroups()
        await self._files.create(spec, self.name, lambda: self._path_specs(spec.limits))
        name, cfg = cgroup_name(os.getpid(), spec.sandbox_id), self.config
        try:
            cgroup = self._tree.create(name, spec.limits)
        except OSError as e:
            raise SandboxStartError(f"bwrap sandbox {spec.sandbox_id}: cannot create cgroup {name}: {e}; "
                                    "run `envfarm sandbox gc` if leftovers pile up") from e
        try:
            filter_fd = seccomp_fd()  # BackendUnavailable without libseccomp: never run unfiltered
            binds, hide = self._binds(spec.sandbox_id)
            share = self._share_pages()
            args = bwrap_args(rootfs, spec.limits, agent_argv(cfg.python, share), cfg.path, filter_fd, binds,
                              SHARE_PAGES_ENV if share else None)
            argv = host_argv(self._setpriv, self._bwrap, cfg.host_uid, cgroup.procs_files, spec.limits, args,
                             hide, self._setarch if share else None)
            try:
                proc = await spawn_agent(argv, env=HOST_ENV, cwd="/", pass_fds=(filter_fd,))
            finally:
                os.close(filter_fd)  # the child has its copy; bwrap reads it before the agent starts
        except BaseException as e:
            cgroup.remove()
            if isinstance(e, OSError):
                raise SandboxStartError(f"bwrap sandbox {spec.sandbox_id} did not spawn: {e}") from e
            raise
        return BwrapHandle(ProcessPipe(proc), cgroup, spec.limits, self._files, spec.sandbox_id)

    def _share_pages(self) -> bool:
        """Whether this sandbox's agent shares its pages (``BwrapConfig.share_agent_pages``)."""
        if self._setarch is None or self.config.share_agent_pages is False:
            return False
        return self.config.share_agent_pages or ksm_running()

    def _binds(self, sandbox_id: str) -> tuple[dict[str, str], list[str]]:
        """The sandbox's writable paths (host folder -> inside), as bwrap sees them from the mount namespace
        ``host_argv(hide=...)`` starts it in, and that ``hide`` argument (empty without ``unshare``)."""
        mounts = self._files.mounts(sandbox_id)
        if self._unshare is None or not mounts:
            return mounts, []
        if self._view is None:
            view = store().root.with_name(store().root.name + "-view")
            view.mkdir(mode=0o711, exist_ok=True)  # an empty folder; each launch shows one sandbox's there
            self._view = view
        box = {str(Path(host).parent) for host in mounts}
        assert len(box) == 1, f"writable paths of {sandbox_id} in several folders: {box}"
        binds = {str(self._view / Path(host).name): inside for host, inside in mounts.items()}
        return binds, [self._unshare, str(store().root), box.pop(), str(self._view)]

    def _path_specs(self, limits: Limits) -> list[PathSpec]:
        uid = self.config.host_uid  # uid 1000 inside; root inside maps to nothing on the host
        return path_specs(limits.disk_mb, limits.shm_mb, uid, uid)

    async def _fork(self, parent: Sandbox, spec: SandboxSpec) -> None:
        """Copy-on-write: freeze the parent's writes, mount the child's overlays; see ``sandbox/fork.py``."""
        await self._files.fork(parent.id, spec, self.name, lambda: self._path_specs(spec.limits))

    async def _abandon(self, spec: SandboxSpec) -> None:
        await self._files.release(spec.sandbox_id)


_AT_EXIT: set[tuple[Path, str]] = set()


def _cleanup_at_exit(tree: CgroupTree) -> None:
    """Fallback for sandboxes never closed: at interpreter exit, kill them and remove their cgroups.

    Keyed by owner pid at exit time, so a forked child that exits never touches its parent's sandboxes."""
    key = (tree.root, next(iter(tree.parents.values())).name)
    if key in _AT_EXIT:
        return
    _AT_EXIT.add(key)

    def cleanup() -> None:
        try:
            n = tree.remove_owned_by(os.getpid())
            store().gc(owner=os.getpid())  # the sandboxes are dead: their overlays and layers can go
        except OSError as e:
            log.debug("bwrap: exit cleanup skipped: %s", e)
            return
        if n:
            log.info("bwrap: removed %d sandbox(es) left open at exit", n)

    atexit.register(cleanup)


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _read_int(path: str) -> int | None:
    text = _read_text(path).strip()
    return int(text) if text.lstrip("-").isdigit() else None


__all__ = ["DEFAULT_HOST_UID", "BwrapBackend", "BwrapConfig", "BwrapHandle", "bwrap_args", "host_argv"]
