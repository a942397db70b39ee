"""The ``local`` backend: the agent runs as a plain host process. NO ISOLATION.

For unit tests of the layers above and for debugging only: commands run as the current user with full
access to the host's files and network. Only the timeout, the output cap and the process-tree kill of the
agent apply; ``Limits`` for cpu, memory, pids and disk are ignored, and so is ``image``. Each sandbox gets
a fresh temporary folder as its workspace, deleted on close.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sys
import tempfile

from .agent_io import ProcessPipe, agent_argv, spawn_agent
from .base import Backend, Handle, SandboxSpec

log = logging.getLogger(__name__)


class LocalHandle(Handle):
    pipe: ProcessPipe

    def __init__(self, pipe: ProcessPipe, workdir: str) -> None:
        self.pipe = pipe
        self.workdir = workdir

    async def destroy(self) -> None:
        await self.pipe.close()
        await asyncio.to_thread(shutil.rmtree, self.workdir, True)

    async def death_reason(self) -> str:
        code = self.pipe.proc.returncode
        return f"agent exited {code}; stderr: {self.pipe.stderr_tail()[-500:]}".strip()


class LocalBackend(Backend):
    """Unsandboxed host processes (no isolation; tests and debugging only)."""

    name = "local"

    async def _open(self, spec: SandboxSpec) -> Handle:
        if spec.image:
            log.debug("local backend ignores image %r", spec.image)
        workdir = tempfile.mkdtemp(prefix=f"envfarm-local-{spec.sandbox_id}-")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": workdir, "LANG": "C.UTF-8",
               "TMPDIR": workdir}
        try:
            proc = await spawn_agent(agent_argv(sys.executable), cwd=workdir, env=env)
        except BaseException:
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        return LocalHandle(ProcessPipe(proc), workdir)
