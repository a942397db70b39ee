"""The ``docker`` backend: one locked-down container per sandbox, the agent reached over one exec stream.

Each container runs the agent itself as its main process (PID 1, so commands inside cannot signal it)
with no network (``network_mode="none"``), no capabilities, no-new-privileges, Docker's default seccomp
profile, uid 1000, a read-only root, size-capped writable /workspace and /tmp (``Limits.disk_mb``) and
/dev/shm (``Limits.shm_mb``): overlays in envfarm's layer store (/dev/shm a plain tmpfs of its own), bound
in with slave propagation, whose upper layers are tmpfs of those sizes (``sandbox/fork.py``: they make
forks copy-on-write), pids/memory/CPU
limits, an open-files cap (``Limits.open_files``), no core dumps, and no
log driver (``none``: whatever the agent's stderr carries never reaches a host disk; the host reads the
attach stream only).

`make setup` starts dockerd with ``--userns-remap=default``: uid 1000 in a container is host uid 101000
(dockremap's subordinate range in /etc/subuid), which no host user owns, so an escape lands as a nobody,
like bwrap's dedicated host uid. ``check()`` warns when the daemon runs without it.

The host talks to the agent over the container's stdin/stdout: ``POST /containers/{id}/attach`` upgraded
to a raw stream on the daemon's unix socket before the container starts, read with asyncio (no host
process and no thread per sandbox). When that stream closes the agent sees end of input and exits, and the
container stops. The docker socket is never mounted into a container.

Every container is labelled ``envfarm=1`` with its owner pid, host and run id; ``gc()`` (run once per
process at first use, and by ``envfarm sandbox gc``) removes containers whose owner process is gone, and an
atexit hook removes this process's containers if the event loop died before closing them.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import socket
import struct
import time
from dataclasses import replace
from typing import Any
from urllib.parse import urlparse

from docker.errors import APIError, DockerException, NotFound
from docker.types import Mount

from envfarm import config
from envfarm.errors import BackendUnavailable, ImageNotFound, SandboxStartError, tail

from .agent_io import LINE_LIMIT, AgentPipe, agent_argv, agent_preamble
from .base import Backend, Handle, Sandbox, SandboxSpec
from .dockerutil import client
from .fork import CowFiles, path_specs, store
from .fork import gc as gc_layers
from .overlay import PathSpec
from .threads import to_the_end

log = logging.getLogger(__name__)

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
FRAME = struct.Struct(">BxxxL")  # docker's multiplexed stream header: stream id, payload size
STDOUT, STDERR = 1, 2
_gc_done = False
_remap_warned = False


def userns_remapped() -> bool:
    """True when the daemon maps container uids to a subordinate range (``dockerd --userns-remap``).

    Raises BackendUnavailable when the daemon does not answer."""
    options = client().info().get("SecurityOptions") or []
    return any(o == "name=userns" or o.startswith("name=userns,") for o in options)


def _socket_path() -> str:
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    url = urlparse(host)
    if url.scheme != "unix":
        raise BackendUnavailable(f"DOCKER_HOST={host} is not a unix socket", "unset DOCKER_HOST")
    return url.path


class DockerStreamPipe(AgentPipe):
    """The agent's stdin/stdout over a hijacked attach stream (frames demultiplexed here)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self._buf = bytearray()
        self._stderr = bytearray()

    @classmethod
    async def attach(cls, container_id: str, api_version: str) -> DockerStreamPipe:
        """Attach to the (not yet started) container's stdin, stdout and stderr."""
        reader, writer = await asyncio.open_unix_connection(_socket_path(), limit=LINE_LIMIT)
        head = (
            f"POST /v{api_version}/containers/{container_id}/attach?stream=1&stdin=1&stdout=1&stderr=1 "
            f"HTTP/1.1\r\nHost: docker\r\nConnection: Upgrade\r\nUpgrade: tcp\r\nContent-Length: 0\r\n\r\n"
        )
        writer.write(head.encode())
        await writer.drain()
        status = await reader.readuntil(b"\r\n\r\n")
        if not status.startswith((b"HTTP/1.1 101", b"HTTP/1.1 200", b"HTTP/1.0 200")):
            writer.close()
            raise SandboxStartError(f"docker refused to attach to {container_id[:12]}: {status[:200]!r}")
        return cls(reader, writer)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def readline(self) -> bytes:
        while (end := self._buf.find(b"\n")) < 0:
            if not await self._read_frame():
                return b""
        line = bytes(self._buf[: end + 1])
        del self._buf[: end + 1]
        return line

    async def _read_frame(self) -> bool:
        try:
            stream, size = FRAME.unpack(await self.reader.readexactly(FRAME.size))
            payload = await self.reader.readexactly(size)
        except (asyncio.IncompleteReadError, ConnectionError):
            return False
        if stream == STDOUT:
            self._buf += payload
        else:
            self._stderr = (self._stderr + payload)[-(1 << 16) :]
        return True

    def stderr_tail(self) -> str:
        return self._stderr.decode(errors="replace")

    @property
    def closed(self) -> bool:
        return self.reader.at_eof() or self.writer.is_closing()

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass


class DockerHandle(Handle):
    def __init__(self, backend: DockerBackend, container_id: str, pipe: DockerStreamPipe,
                 sandbox_id: str) -> None:
        self.backend = backend
        self.sandbox_id = sandbox_id
        self.container_id = container_id
        self.pipe = pipe
        self._destroyed = False

    async def destroy(self) -> None:
        if self._destroyed:
            return
        self._destroyed = True
        try:
            await self.pipe.close()
        finally:  # the container goes even when closing the stream failed or was cancelled
            try:
                await to_the_end(self.backend._remove, self.container_id)
            finally:
                await self.backend._files.release(self.sandbox_id)

    async def death_reason(self) -> str:
        for _ in range(20):  # the stream can end a moment before the daemon records the exit
            try:
                info = await asyncio.to_thread(client().api.inspect_container, self.container_id)
            except NotFound:
                return f"container {self.container_id[:12]} was removed from outside"
            state = info.get("State", {})
            if not state.get("Running"):
                break
            await asyncio.sleep(0.1)
        why = f"container {self.container_id[:12]} {state.get('Status')} (exit {state.get('ExitCode')}"
        why += ", OOM-killed)" if state.get("OOMKilled") else ")"
        if agent_err := self.pipe.stderr_tail().strip():
            why += f"; agent stderr: {tail(agent_err, lines=5)}"
        return why


class DockerBackend(Backend):
    """Locked-down Docker containers (see module docstring). Needs a running daemon (`make setup`)."""

    name = "docker"

    def __init__(self, runtime: str | None = None) -> None:
        super().__init__()
        self.runtime = runtime
        self._files = CowFiles()
        self._remap: tuple[int, int] | None = None

    async def check(self) -> None:
        global _remap_warned
        if not await asyncio.to_thread(userns_remapped) and not _remap_warned:
            _remap_warned = True
            uid = config.AGENT_UID
            log.warning("the docker daemon runs without --userns-remap: uid %d in a container is host uid "
                        "%d; run `make setup` to restart it with the remap", uid, uid)

    async def _open(self, spec: SandboxSpec) -> Handle:
        await self._gc_once()
        name = f"envfarm-{spec.sandbox_id}"
        try:
            image = await asyncio.to_thread(_resolve, spec.image)
            if self._remap is None:
                self._remap = await asyncio.to_thread(remap_base)
            await self._files.create(spec, self.name, lambda: self._path_specs(spec))
            cid = await to_the_end(self._create, name, image, spec)  # a cancelled start removes it below
            pipe = await DockerStreamPipe.attach(cid, client().api._version)
            await to_the_end(client().api.start, cid)
            await pipe.send(agent_preamble())  # the agent's source: what its boot program reads first
        except BaseException as e:
            await asyncio.shield(self._discard(name, spec.sandbox_id))
            if isinstance(e, (APIError, OSError)):
                raise SandboxStartError(f"docker sandbox {name} did not start: {e}") from e
            raise
        return DockerHandle(self, cid, pipe, spec.sandbox_id)

    async def _discard(self, name: str, sandbox_id: str) -> None:
        try:
            await asyncio.to_thread(self._remove, name)
        finally:
            await self._files.release(sandbox_id)

    def _path_specs(self, spec: SandboxSpec) -> list[PathSpec]:
        uid, gid = self._remap or (0, 0)  # what uid 0 in a container is on the host
        specs = path_specs(spec.limits.disk_mb, spec.limits.shm_mb, uid + config.AGENT_UID, uid)
        return [s if s.name == "workspace" else replace(s, gid=gid) for s in specs]

    async def _fork(self, parent: Sandbox, spec: SandboxSpec) -> None:
        """Copy-on-write, no ``docker commit``: freeze the parent's writes, mount the child's overlays
        (bound into its container later); see ``sandbox/fork.py``."""
        await self._files.fork(parent.id, spec, self.name, lambda: self._path_specs(spec))

    async def _abandon(self, spec: SandboxSpec) -> None:
        await self._files.release(spec.sandbox_id)

    def _create(self, name: str, image: str, spec: SandboxSpec) -> str:
        api = client().api
        lim = spec.limits
        host_config = api.create_host_config(
            network_mode="none",
            read_only=True,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            pids_limit=lim.pids,
            mem_limit=f"{lim.memory_mb}m",
            memswap_limit=f"{lim.memory_mb}m",
            nano_cpus=int(lim.cpus * 1e9),
            mounts=[Mount(inside, host, type="bind", propagation="rslave")  # overlays: sandbox/fork.py
                    for host, inside in self._files.mounts(spec.sandbox_id).items()],
            init=False,  # the agent is PID 1 (see the module docstring)
            runtime=self.runtime,
            ulimits=[{"Name": "core", "Soft": 0, "Hard": 0},
                     {"Name": "nofile", "Soft": lim.open_files, "Hard": lim.open_files}],
            log_config={"Type": "none", "Config": {}},
        )
        labels = {config.LABEL: "1", **{f"envfarm.{k}": v for k, v in config.owner().items()}}
        labels.update(spec.labels)
        created = api.create_container(
            image,
            command=agent_argv(),
            name=name,
            stdin_open=True,
            detach=False,  # with stdin_open: StdinOnce; our stream closing ends the agent and container
            user=f"{config.AGENT_UID}:{config.AGENT_UID}",
            working_dir=config.AGENT_HOME,
            environment={"PATH": PATH, "HOME": config.AGENT_HOME, "LANG": "C.UTF-8"},
            hostname="sandbox",
            labels=labels,
            host_config=host_config,
            network_disabled=True,
            stop_signal="SIGKILL",
        )
        return str(created["Id"])

    @staticmethod
    def _remove(name_or_id: str, tries: int = 3) -> None:
        """Remove a container, killing it first; a busy daemon that fails the kill is asked again."""
        for attempt in range(1, tries + 1):
            try:
                client().api.remove_container(name_or_id, force=True, v=True)
                return
            except NotFound:
                return
            except (APIError, DockerException) as e:
                if "already in progress" in str(e):
                    return
                if attempt == tries:
                    log.warning("could not remove container %s: %s", name_or_id, e)
                    return
                time.sleep(attempt)

    async def _gc_once(self) -> None:
        global _gc_done
        if not _gc_done:
            _gc_done = True
            removed = await self.gc()
            if removed:
                log.info("removed %d orphaned envfarm containers", removed)

    async def gc(self, all_runs: bool = False) -> int:
        removed = await asyncio.to_thread(_gc, all_runs)
        await gc_layers(all_runs)  # the writable paths of sandboxes whose owner died (bwrap's too)
        return removed


def remap_base() -> tuple[int, int]:
    """Host uid and gid of root in a container: the daemon's --userns-remap range, (0, 0) without one.

    The daemon keeps a remapped root's files in ``<data root>/<uid>.<gid>``."""
    root = str(client().info().get("DockerRootDir") or "")
    uid, _, gid = root.rsplit("/", 1)[-1].partition(".")
    return (int(uid), int(gid)) if uid.isdigit() and gid.isdigit() and userns_remapped() else (0, 0)


def _resolve(image: str | None) -> str:
    from .images import resolve_image

    return resolve_image(image)


def _owner_alive(labels: dict[str, str]) -> bool:
    if labels.get("envfarm.owner_host") != socket.gethostname():
        return True  # not ours to judge
    try:
        pid = int(labels.get("envfarm.owner_pid", "0"))
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return pid != 0


def _gc(all_runs: bool) -> int:
    label = {"label": f"{config.LABEL}=1"}
    containers: list[dict[str, Any]] = client().api.containers(all=True, filters=label)
    doomed = [c for c in containers if all_runs or not _owner_alive(c.get("Labels") or {})]
    for c in doomed:
        DockerBackend._remove(c["Id"])
    return len(doomed)


def _remove_own_containers() -> None:
    """atexit fallback: containers this process still owns (its loop died before closing them)."""
    try:
        mine = client().api.containers(
            all=True, filters={"label": [f"{config.LABEL}=1", f"envfarm.owner_pid={os.getpid()}"]}
        )
    except (BackendUnavailable, DockerException):
        mine = []
    for c in mine:
        DockerBackend._remove(c["Id"])
    if os.geteuid() == 0:  # then their overlays and layers (only root mounts them)
        try:
            store().gc(owner=os.getpid())
        except OSError as e:
            log.debug("layer store cleanup at exit skipped: %s", e)


atexit.register(_remove_own_containers)

__all__ = ["DockerBackend", "ImageNotFound", "userns_remapped"]
