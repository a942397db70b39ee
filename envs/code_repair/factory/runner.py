"""Running a project's tests in one long-lived sandbox, for the baseline and for each mutant.

    async with TestSession.open(backend, image, tree, command) as session:
        run = await session.run(["tests/test_a.py"], timeout_s=30)             # the files as they are
        run = await session.run_mutant("pkg/mod.py", buggy, original, files, 30)  # write, run, restore

The repository is uploaded once to ``/workspace/testbed``; a mutant writes one file, runs the test
command on the chosen test files with a timeout, parses the log with the harness's pytest log parser
(swebench's ``parse_log_pytest``) and writes the original file back. Bytecode is never written
(``PYTHONDONTWRITEBYTECODE``), so a restored file is really restored.
"""

from __future__ import annotations

import logging
import shlex
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from envfarm.harness import _swebench
from envfarm.harness.images import WORKDIR
from envfarm.sandbox import Backend, Limits, Sandbox

from .sdist import write_tree

log = logging.getLogger(__name__)

PARSER = "parse_log_pytest"
LIMITS = Limits(cpus=1.0, memory_mb=2048, pids=512, disk_mb=512, output_bytes=8 << 20, timeout_s=600)


@dataclass(frozen=True)
class TestRun:
    """One run of the test command."""

    __test__ = False

    statuses: Mapping[str, str]
    """swebench's {test id: PASSED | FAILED | SKIPPED | ERROR | XFAIL}."""
    log: str
    exit_code: int
    duration_s: float
    timed_out: bool


def parse_log(text: str) -> dict[str, str]:
    """The harness's pytest log parser (swebench ``parse_log_pytest``) on a raw pytest log."""
    parser = _swebench.load().log_parsers.PARSER_REGISTRY[PARSER]
    return dict(parser(text, None))


class TestSession:
    """One sandbox holding the repository; runs the test command on demand (one run at a time)."""

    __test__ = False

    def __init__(self, sb: Sandbox, command: str, env: Mapping[str, str]) -> None:
        self.sb, self.command, self.env = sb, command, dict(env)

    @classmethod
    @asynccontextmanager
    async def open(cls, backend: Backend, image: str, files: Mapping[str, bytes], command: str,
                   env: Mapping[str, str]) -> AsyncIterator[TestSession]:
        async with backend.open(image=image, limits=LIMITS, labels={"envfarm.factory": "1"}) as sb:
            with tempfile.TemporaryDirectory(prefix="envfarm-mine-") as tmp:
                write_tree(files, Path(tmp))
                await sb.upload(tmp, WORKDIR)
            yield cls(sb, command, env)

    async def run(self, test_files: Sequence[str], timeout_s: float) -> TestRun:
        cmd = " ".join([self.command, *map(shlex.quote, test_files)])
        script = f"{cmd} > /tmp/envfarm-tests.log 2>&1"
        res = await self.sb.exec(["bash", "-c", script], cwd=WORKDIR, env=self.env, timeout_s=timeout_s)
        raw = (await self.sb.read_file("/tmp/envfarm-tests.log")).decode("utf-8", errors="replace")
        statuses = {} if res.timed_out else parse_log(raw)
        return TestRun(statuses, raw, res.exit_code, res.duration, res.timed_out)

    async def run_mutant(self, path: str, buggy: bytes, original: bytes, test_files: Sequence[str],
                         timeout_s: float) -> TestRun:
        """Write ``buggy`` to ``path``, run the tests, write ``original`` back (even on failure)."""
        target = f"{WORKDIR}/{path}"
        await self.sb.write_file(target, buggy)
        try:
            return await self.run(test_files, timeout_s)
        finally:
            await self.sb.write_file(target, original)

