"""The host end of the pipe to the in-sandbox agent, and the command line that starts the agent."""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from functools import cache
from pathlib import Path

log = logging.getLogger(__name__)

LINE_LIMIT = 1 << 28  # one agent reply can carry 2 x output_bytes of JSON-escaped text or 4 MiB of base64


@cache
def agent_source() -> str:
    return (Path(__file__).with_name("agent.py")).read_text()


AGENT_BOOT = """import sys
sys.path[:] = [p for p in sys.path if p]
import marshal, os
def take(n):
    parts = []
    while n:
        part = os.read(0, n)
        if not part:
            os._exit(1)
        parts.append(part)
        n -= len(part)
    return b"".join(parts)
size = b""
while not size.endswith(b"\\n"):
    size += take(1)
source = take(int(size))
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    code = memoryview(marshal.dumps(compile(source, "envfarm-agent", "exec")))
    while code:
        code = code[os.write(w, code):]
    os._exit(0)
os.close(w)
del source
parts = []
while True:
    part = os.read(r, 1 << 16)
    if not part:
        break
    parts.append(part)
os.close(r)
try:
    os.waitpid(pid, 0)
except ChildProcessError:  # SIGCHLD ignored by whoever started us: the child reaped itself
    pass
code = marshal.loads(b"".join(parts))
del parts, size, r, w, pid, take
exec(code)
"""
"""The ``-c`` program that boots the agent: it reads the agent's source from stdin (``agent_preamble``,
the first bytes the host writes), compiles it in a short-lived child and runs the child's code. Every
idle sandbox holds ~0.5 MiB less than with the source as a ``-c`` argument: Python keeps the syntax tree
of a ``-c`` program while it runs, several copies of its argv, and the compiler's leftovers on its heap.
Its first line drops the current folder from the import path, which ``-c`` puts there unless ``-I``."""

SHARE_PAGES_ENV = {"ENVFARM_SHARE_PAGES": "1", "PYTHONHASHSEED": "0"}
"""The agent's environment when it shares its pages (``agent.share_pages``, which reads the first name)."""


def agent_argv(python: str = "python3", share_pages: bool = False) -> list[str]:
    """argv that starts the agent; the host then writes ``agent_preamble()`` to its stdin, first.

    ``-I``: isolated (no environment variables, no user site, no current folder on the path); ``-S``: no
    ``site`` (the agent needs the standard library alone, and every idle sandbox maps less).
    ``share_pages``: ``-s`` (no user site) instead of ``-I``, so that the agent reads ``PYTHONHASHSEED``
    from ``SHARE_PAGES_ENV``; the caller then owns the whole environment (bwrap's ``--clearenv``)."""
    return [python, "-u", "-s" if share_pages else "-I", "-S", "-c", AGENT_BOOT]


@cache
def agent_preamble() -> bytes:
    """The agent's source as ``AGENT_BOOT`` reads it: its length in bytes, a newline, the source."""
    source = agent_source().encode()
    return b"%d\n" % len(source) + source


class AgentPipe(ABC):
    """A byte pipe to one agent: newline-framed requests out, newline-framed replies in."""

    @abstractmethod
    async def send(self, data: bytes) -> None: ...

    @abstractmethod
    async def readline(self) -> bytes:
        """One reply line including its newline; ``b""`` once the agent is gone."""

    @abstractmethod
    async def close(self) -> None: ...

    def stderr_tail(self) -> str:
        """What the agent printed on stderr (a traceback when it crashed), if the backend keeps it."""
        return ""

    @property
    def closed(self) -> bool:
        """True once the agent is known to be gone (cheap; no I/O)."""
        return False


class ProcessPipe(AgentPipe):
    """The agent as a child process of ours (bwrap, local): its stdin and stdout are the pipe.

    The agent's stderr is read only after it died, so a crash traceback reaches the error message."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self._stderr = ""

    async def send(self, data: bytes) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        stdin.write(data)
        await stdin.drain()

    async def readline(self) -> bytes:
        stdout = self.proc.stdout
        assert stdout is not None
        line = await stdout.readline()
        if not line:
            await self.collect_stderr()
        return line

    async def collect_stderr(self) -> None:
        if self.proc.stderr is None or self._stderr:
            return
        try:
            async with asyncio.timeout(1):
                self._stderr = (await self.proc.stderr.read(1 << 16)).decode(errors="replace")
        except (TimeoutError, OSError):
            pass

    def stderr_tail(self) -> str:
        return self._stderr

    @property
    def closed(self) -> bool:
        return self.proc.returncode is not None

    async def close(self, grace_s: float = 2.0) -> None:
        """Close the agent's stdin (it then kills any command in flight and exits), then kill it if it
        has not exited within ``grace_s``."""
        if self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.close()
        try:
            async with asyncio.timeout(grace_s):
                await self.proc.wait()
            return
        except TimeoutError:
            pass
        try:
            self.proc.kill()
        except ProcessLookupError:
            pass
        await self.proc.wait()


async def spawn_agent(argv: list[str], **kwargs: object) -> asyncio.subprocess.Process:
    """Start ``argv`` (``agent_argv()`` inside the sandbox) with pipes on stdin/stdout/stderr sized for
    agent replies, and write the agent's source to its stdin."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        limit=LINE_LIMIT,
        start_new_session=True,
        **kwargs,  # type: ignore[arg-type]
    )
    assert proc.stdin is not None
    proc.stdin.write(agent_preamble())  # buffered: the first request's drain flushes it
    return proc
