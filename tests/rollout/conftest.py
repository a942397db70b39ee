"""Fixtures of the rollout tests: a scripted OpenAI-compatible server on loopback (rollout_support.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from rollout_support import StubServer, toolcalc_solutions

SEEDS = range(200)


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
