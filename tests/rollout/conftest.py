"""Fixtures of the rollout tests: a scripted OpenAI-compatible server on loopback (rollout_support.py), and a
slow disk under the run's spool."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from rollout_support import StubServer, toolcalc_solutions

from envfarm.rollout import Spool

SEEDS = range(200)
SLOW_COMMIT_S = 0.3


@pytest.fixture(scope="session")
def solutions() -> dict[str, list[dict[str, Any]]]:
    return toolcalc_solutions(SEEDS)


@pytest.fixture
async def stub(solutions: dict[str, list[dict[str, Any]]]) -> AsyncIterator[StubServer]:
    server = StubServer(solutions)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def slow_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each spool commit waits SLOW_COMMIT_S before its write, as an fsync does on a disk busy with image
    builds: a run that stops then always finds lines still queued for its spool."""
    real = Spool._write

    def slow_write(self: Spool, data: bytes) -> None:
        time.sleep(SLOW_COMMIT_S)  # in the spool's worker thread, where a slow fsync would block
        real(self, data)

    monkeypatch.setattr(Spool, "_write", slow_write)
