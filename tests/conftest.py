"""Shared fixtures. Docker and bwrap tests are real: `make setup` starts the daemon and builds the images."""

from __future__ import annotations

import bisect
import os
import time
from collections.abc import AsyncIterator

import pytest

from envfarm.sandbox import Backend, get_backend

ISOLATED = [
    pytest.param("docker", marks=pytest.mark.docker, id="docker"),
    pytest.param("bwrap", marks=pytest.mark.bwrap, id="bwrap"),
]
ALL = [*ISOLATED, pytest.param("local", id="local")]


SHARED_PAGES = pytest.param("bwrap-shared", marks=pytest.mark.bwrap, id="bwrap-shared")
"""bwrap whose agents share their pages (``share_agent_pages``), for the suites that must hold there too."""


async def _backend(name: str) -> AsyncIterator[Backend]:
    backend = get_backend("bwrap", share_agent_pages=True) if name == "bwrap-shared" else get_backend(name)
    await backend.check()
    try:
        yield backend
    finally:
        await backend.aclose()
        assert backend.live == 0, f"{name} backend still has {backend.live} sandboxes open"


@pytest.fixture(params=ALL)
async def any_backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    """Each backend in turn, the unisolated `local` one included (for exec semantics)."""
    async for backend in _backend(request.param):
        yield backend


@pytest.fixture(params=ISOLATED)
async def isolated_backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    """The backends that must contain hostile code: docker and bwrap."""
    async for backend in _backend(request.param):
        yield backend


@pytest.fixture(params=[*ISOLATED, SHARED_PAGES])
async def hostile_backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    """The isolating backends, and bwrap with shared agent pages: the hostile probes must hold in each."""
    async for backend in _backend(request.param):
        yield backend


_STARTED: list[tuple[float, str]] = []
"""(wall-clock start, node id) of each test so far: a container left behind names the test it was made in."""


def pytest_runtest_logstart(nodeid: str, location: object) -> None:
    _STARTED.append((time.time(), nodeid))


def _made_during(created: float) -> str:
    """The test that was running when a container was created (its setup, call or teardown; docker
    gives the time to the second, so a test shorter than that may name the one before it)."""
    at = bisect.bisect_right([t for t, _ in _STARTED], created) - 1
    return _STARTED[at][1] if at >= 0 else "before the first test"


@pytest.fixture(scope="session", autouse=True)
def no_leftover_containers() -> object:
    """After the whole run, this process must own no container (zero left after any test)."""
    yield
    from envfarm.sandbox import dockerutil

    if not dockerutil.ping():
        return
    mine = dockerutil.client().api.containers(all=True, filters={"label": f"envfarm.owner_pid={os.getpid()}"})
    left = [f"{c['Names'][0]} ({c['Image']}, {c['Status']}) made during {_made_during(c['Created'])}"
            for c in mine]
    assert not left, f"{len(left)} envfarm containers left behind: {left}"
