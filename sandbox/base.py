"""The sandbox contract: read this file first.

    backend = get_backend("docker")              # or "bwrap", "local"
    async with backend.open(image=None, limits=Limits(memory_mb=512)) as sb:
        res = await sb.exec("pytest -q", timeout_s=30)
        res.exit_code, res.stdout, res.stderr, res.duration, res.timed_out, res.truncated
        await sb.write_file("/workspace/a.py", "print(1)\\n")
        data = await sb.read_file("/workspace/a.py")
        await sb.upload("local_dir", "/workspace/repo")
        await sb.download("/workspace/repo", "out_dir")

A backend only knows how to start one isolated process tree and connect a byte pipe to the in-sandbox
agent (``sandbox/agent.py``) running inside it, and how to destroy it. This module owns everything else,
once for all backends: the agent protocol, timeouts, output caps, crash detection, file transfer,
cancellation, idempotent close, logging and error mapping. Its values (:class:`Limits`, :class:`ExecResult`,
the timeouts) live one floor down in ``values.py`` and are re-exported here.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import time
import warnings
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

from envfarm.errors import (
    ConfigError,
    ForkError,
    ForkUnsupported,
    SandboxCrashed,
    SandboxError,
    SandboxFileError,
    SandboxStartError,
)

from .agent_io import AgentPipe, agent_argv
from .transfer import Transfers
from .values import PARENT_LABEL, TIMEOUTS, ExecResult, Limits

log = logging.getLogger(__name__)
_SANDBOX_NUMBERS = itertools.count(1)
"""Sandbox numbers of this process (``next`` is atomic under the GIL)."""

@dataclass(frozen=True)
class SandboxSpec:
    """What a backend is asked to start."""

    sandbox_id: str
    image: str | None
    limits: Limits
    labels: Mapping[str, str] = field(default_factory=dict)


class Handle(ABC):
    """One live sandbox as a backend sees it: a pipe to its agent and a way to destroy it."""

    pipe: AgentPipe
    workdir: str = "/workspace"

    @abstractmethod
    async def destroy(self) -> None:
        """Kill every process of the sandbox and free its resources. Idempotent."""

    async def death_reason(self) -> str:
        """Why the sandbox died, for error messages (exit code, OOM, killed from outside)."""
        return ""


class _BootPipe(AgentPipe):
    """Stands in for the pipe of a sandbox whose agent is still starting (never used for I/O)."""

    async def send(self, data: bytes) -> None:
        raise ConnectionError("the sandbox has not started")

    async def readline(self) -> bytes:
        return b""

    async def close(self) -> None:
        pass


class Booting(Handle):
    """A forked sandbox whose process tree starts in the background; its first call waits for it."""

    def __init__(self, backend: Backend, spec: SandboxSpec) -> None:
        self.spec = spec
        self.backend = backend
        self.pipe = _BootPipe()
        self.task: asyncio.Task[Handle] = asyncio.ensure_future(backend._boot(spec))

    async def destroy(self) -> None:
        self.task.cancel()
        try:
            handle = await self.task
        except BaseException:  # cancelled or failed: nothing started, or _open cleaned up after itself
            await self.backend._abandon(self.spec)
            return
        await handle.destroy()


class Sandbox(Transfers):
    """A live sandbox. Commands run one at a time (callers are serialised by a lock)."""

    def __init__(self, backend: Backend, spec: SandboxSpec, handle: Handle) -> None:
        self.backend = backend
        self.spec = spec
        self.id = spec.sandbox_id
        self.limits = spec.limits
        self.workdir = handle.workdir
        self._handle = handle
        self._lock = asyncio.Lock()
        self._next_id = 0
        self._dead: str | None = None
        self._dead_error: type[SandboxCrashed] = SandboxCrashed
        self._close_task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"<Sandbox {self.backend.name}:{self.id} image={self.spec.image or 'base'}>"

    @property
    def parent_id(self) -> str | None:
        """Id of the sandbox this one was forked from; None for a sandbox that was opened."""
        return self.spec.labels.get(PARENT_LABEL)

    async def fork(self) -> Sandbox:
        """A new live sandbox whose writable paths hold what this one's hold now; the caller closes it.

        Copy-on-write (``sandbox/fork.py``): nothing is copied, and each side's later writes, deletions and
        permission changes stay its own. Same image and limits. The snapshot is taken between two commands
        (a command in flight finishes first). Processes are not copied: the child's agent starts fresh,
        in the background, and its first call waits for it (``SandboxStartError`` there if it cannot).
        Closing this sandbox leaves its children running. Raises ForkUnsupported on a backend that cannot
        fork, ForkError otherwise."""
        return await self.backend._fork_sandbox(self)

    @property
    def alive(self) -> bool:
        return self._dead is None and self._close_task is None and not self._handle.pipe.closed

    # ------------------------------------------------------------------------------------------ commands

    async def exec(
        self,
        cmd: str | Sequence[str],
        timeout_s: float | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        check: bool = False,
        *,
        timeout: float | None = None,
    ) -> ExecResult:
        """Run ``cmd`` (a string goes to ``bash -c``; a list is an argv) and wait for it.

        The command's whole process tree is killed when it ends or after ``timeout_s`` (default
        ``Limits.timeout_s``). A timeout is a result (``timed_out=True``) unless ``check=True``, which raises
        ExecTimeout / ExecFailed instead. ``timeout=`` is the deprecated spelling of ``timeout_s=``.
        """
        if timeout is not None:
            warnings.warn("Sandbox.exec(timeout=) is deprecated; pass timeout_s=", DeprecationWarning,
                          stacklevel=2)
            timeout_s = timeout if timeout_s is None else timeout_s
        argv = ["/bin/bash", "-c", cmd] if isinstance(cmd, str) else [str(a) for a in cmd]
        if not argv:
            raise ConfigError("exec needs a command; got an empty argv")
        limit = self.limits.timeout_s if timeout_s is None else float(timeout_s)
        reply = await self._call(
            "exec",
            limit + TIMEOUTS.agent_grace_s,
            argv=argv,
            cwd=cwd or self.workdir,
            env=dict(env or {}),
            timeout=limit,
            max_output=self.limits.output_bytes,
        )
        result = ExecResult(
            exit_code=reply["exit_code"],
            stdout=reply["stdout"],
            stderr=reply["stderr"],
            duration=reply["duration"],
            timed_out=reply["timed_out"],
            truncated=reply["truncated"],
        )
        log.debug("%s exec %r -> %s in %.3fs", self, argv[:3], result.exit_code, result.duration)
        return result.check(f"{argv!r} in {self}") if check else result

    # ------------------------------------------------------------------------------------- agent protocol

    async def _call(self, op: str, deadline_s: float, **fields: Any) -> dict[str, Any]:
        """Send one request to the agent and wait for its answer; maps every failure to SandboxError."""
        async with self._lock:
            if isinstance(self._handle, Booting) and self._dead is None:
                await self._booted(self._handle)
            if self._dead is not None:
                raise self._dead_error(f"{self} is dead: {self._dead}")
            self._next_id += 1
            req_id = self._next_id
            line = json.dumps({"id": req_id, "op": op, **fields}, separators=(",", ":")).encode() + b"\n"
            try:
                async with asyncio.timeout(deadline_s):
                    await self._handle.pipe.send(line)
                    reply = await self._read_reply(req_id)
            except asyncio.CancelledError:
                await self._cancel_in_flight(req_id)
                raise
            except TimeoutError:
                await self._mark_dead(f"the agent did not answer {op!r} within {deadline_s:.0f}s")
                raise self._dead_error(f"{self} hung: {self._dead}") from None
            except (OSError, EOFError, ConnectionError) as e:
                reason = await self._mark_dead(f"the agent pipe broke during {op!r} ({e})")
                raise self._dead_error(f"{self} died during {op!r}: {reason}") from e
            if self._dead is not None:  # kill()ed while in flight: the agent may have answered first
                raise self._dead_error(f"{self} was killed during {op!r}: {self._dead}")
        if not reply.get("ok"):
            raise _agent_error(self, op, fields, reply)
        return reply

    async def _booted(self, booting: Booting) -> None:
        """Wait for a forked sandbox's process tree (a cancelled caller leaves it starting)."""
        try:
            self._handle = await asyncio.shield(booting.task)
        except asyncio.CancelledError:
            if not booting.task.done():
                raise
            self._dead = "it was closed while starting"
        except Exception as e:
            self._dead = f"it did not start: {e}"
            raise SandboxStartError(f"{self} (a fork) did not start: {e}") from e

    async def _read_reply(self, req_id: int) -> dict[str, Any]:
        while True:
            raw = await self._handle.pipe.readline()
            if not raw:
                raise EOFError("end of stream")
            reply: dict[str, Any] = json.loads(raw)
            if reply.get("id") == req_id:
                return reply
            log.debug("%s skipped a stale agent reply %s", self, reply.get("id"))

    async def _cancel_in_flight(self, req_id: int) -> None:
        """The caller gave up mid-request: ask the agent to kill the command; its late reply is skipped."""
        msg = json.dumps({"op": "cancel", "target": req_id}).encode() + b"\n"
        try:
            await asyncio.shield(self._handle.pipe.send(msg))
        except (OSError, ConnectionError, asyncio.CancelledError):
            pass

    async def _mark_dead(self, why: str) -> str:
        if self._dead is not None:  # killed on purpose (kill()): keep that reason
            return self._dead
        reason = ""
        try:
            async with asyncio.timeout(5):
                reason = await self._handle.death_reason()
        except (TimeoutError, OSError, SandboxError) as e:
            reason = f"(could not ask why: {e})"
        self._dead = f"{why}; {reason}".rstrip("; ") if reason else why
        log.warning("%s: %s", self, self._dead)
        return self._dead

    # ------------------------------------------------------------------------------------------ lifecycle

    async def kill(self, reason: str, error: type[SandboxCrashed] = SandboxCrashed) -> None:
        """Destroy the sandbox on purpose; a command in flight and later calls raise ``error(reason)``."""
        if self._dead is None:
            self._dead, self._dead_error = reason, error
        await self.close()

    async def close(self) -> None:
        """Destroy the sandbox. Idempotent, and completes even if the caller is cancelled."""
        if self._close_task is None:
            if self._dead is None:  # a command still in flight raises instead of returning a half result
                self._dead = "the sandbox was closed"
            self._close_task = asyncio.ensure_future(self._destroy())
        await asyncio.shield(self._close_task)

    async def _destroy(self) -> None:
        try:
            await self._handle.destroy()
        finally:
            self.backend._forget(self)
            log.debug("%s closed", self)

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _agent_error(sb: Sandbox, op: str, fields: Mapping[str, Any], reply: Mapping[str, Any]) -> SandboxError:
    what = fields.get("path") or fields.get("argv") or op
    msg = f"{op} {what!r} in {sb} failed: {reply.get('kind')}: {reply.get('error')}"
    if reply.get("errno") is not None or op in ("read", "write"):
        return SandboxFileError(reply.get("errno") or 0, msg)
    return SandboxError(msg)


class Backend(ABC):
    """A kind of sandbox. Subclasses implement ``_open`` (start + connect the agent) and nothing else."""

    name: ClassVar[str]

    def __init__(self) -> None:
        self._live: dict[str, Sandbox] = {}

    @property
    def live(self) -> int:
        """Number of sandboxes this backend object has open right now."""
        return len(self._live)

    @abstractmethod
    async def _open(self, spec: SandboxSpec) -> Handle:
        """Start an isolated sandbox running ``agent_argv()`` and return its handle.

        Must clean up after itself when it fails or is cancelled half-way."""

    async def _fork(self, parent: Sandbox, spec: SandboxSpec) -> None:
        """Snapshot ``parent``'s writable paths for a child that ``_open(spec)`` will start (same image and
        limits). Called with the parent's command lock held; should be quick (the child boots later).

        Backends that can fork override it."""
        raise ForkUnsupported(f"the {self.name} backend cannot fork sandboxes")

    async def _abandon(self, spec: SandboxSpec) -> None:
        """Free what ``_fork`` prepared for a child whose ``_open`` never ran (closed while booting)."""

    async def _fork_sandbox(self, parent: Sandbox) -> Sandbox:
        if type(self)._fork is Backend._fork:  # refuse before starting anything
            raise ForkUnsupported(f"the {self.name} backend cannot fork sandboxes")
        if not parent.alive:
            raise ForkError(f"cannot fork {parent}: it is {parent._dead or 'closed'}")
        labels = {**parent.spec.labels, PARENT_LABEL: parent.id}
        spec = SandboxSpec(self._new_id(), parent.spec.image, parent.limits, labels)
        try:
            async with parent._lock, asyncio.timeout(TIMEOUTS.start_s):
                if parent._dead is not None:
                    raise ForkError(f"cannot fork {parent}: it is {parent._dead}")
                await self._fork(parent, spec)
        except BaseException as e:
            await asyncio.shield(self._abandon(spec))
            if isinstance(e, TimeoutError):
                raise ForkError(f"forking {parent} took over {TIMEOUTS.start_s:.0f}s (including the wait for "
                                "its command in flight); fork between commands") from e
            raise
        child = Sandbox(self, spec, Booting(self, spec))
        self._live[child.id] = child
        log.debug("%s forked from %s", child, parent)
        return child

    async def _boot(self, spec: SandboxSpec) -> Handle:
        try:
            async with asyncio.timeout(TIMEOUTS.start_s):
                return await self._open(spec)
        except TimeoutError as e:
            raise SandboxStartError(f"{self.name} sandbox {spec.sandbox_id} did not start in "
                                    f"{TIMEOUTS.start_s:.0f}s") from e

    async def check(self) -> None:
        """Raise BackendUnavailable (with the fix) when this backend cannot run here."""

    async def gc(self, all_runs: bool = False) -> int:
        """Remove sandboxes (and their leftovers) whose owner process is gone; all of them with
        ``all_runs``. Returns how many were removed. Backends with nothing to leak keep this default."""
        return 0

    def _new_id(self) -> str:
        """Unique per host: run id, pid (forked workers share the run id and a copy of the counter), count.

        The count is per process, not per backend: two backends of one process never hand out the same id."""
        from envfarm.config import run_id

        return f"{run_id()}-{os.getpid():x}-{next(_SANDBOX_NUMBERS):05d}"

    async def start(
        self, image: str | None = None, limits: Limits | None = None, labels: Mapping[str, str] | None = None
    ) -> Sandbox:
        """Start a sandbox and wait until its agent answers. The caller must ``close()`` it."""
        spec = SandboxSpec(self._new_id(), image, limits or Limits(), dict(labels or {}))
        t0 = time.perf_counter()
        try:
            async with asyncio.timeout(TIMEOUTS.start_s):
                handle = await self._open(spec)
        except TimeoutError as e:
            raise SandboxStartError(f"{self.name} sandbox {spec.sandbox_id} did not start in "
                                    f"{TIMEOUTS.start_s:.0f}s") from e
        sb = Sandbox(self, spec, handle)
        self._live[sb.id] = sb
        try:
            await sb._call("ping", TIMEOUTS.start_s)
        except BaseException as e:
            await sb.close()
            if isinstance(e, SandboxError):
                raise SandboxStartError(f"the agent in {sb} did not start: {e}") from e
            raise
        log.debug("%s started in %.3fs", sb, time.perf_counter() - t0)
        return sb

    @asynccontextmanager
    async def open(
        self, image: str | None = None, limits: Limits | None = None, labels: Mapping[str, str] | None = None
    ) -> AsyncIterator[Sandbox]:
        """``async with backend.open() as sb:`` — a sandbox that is destroyed on exit, whatever happens."""
        sb = await self.start(image, limits, labels)
        try:
            yield sb
        finally:
            await sb.close()

    def _forget(self, sb: Sandbox) -> None:
        self._live.pop(sb.id, None)

    async def aclose(self) -> None:
        """Close every sandbox this backend still has open."""
        await asyncio.gather(*(sb.close() for sb in list(self._live.values())), return_exceptions=True)


__all__ = ["AgentPipe", "Backend", "ExecResult", "Handle", "Limits", "Sandbox", "SandboxSpec", "agent_argv"]
