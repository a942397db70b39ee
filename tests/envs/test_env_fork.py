"""AgentEnv.fork: an env at the same state mid-episode, sandbox forked and Python state copied."""

from __future__ import annotations

import json
from collections.abc import Iterator

import gymnasium
import pytest

import envfarm.envs  # noqa: F401 - registers the envs
from envfarm.envs.checks import check_fork
from envfarm.envs.core import AgentEnv
from envfarm.envs.tool_use.toolcalc import ToolCalcEnv
from envfarm.errors import ForkError, ForkUnsupported
from envfarm.sandbox.pool import Pools


def bash(command: str) -> str:
    return json.dumps({"name": "bash", "arguments": {"command": command}})


@pytest.fixture
def fileops() -> Iterator[AgentEnv[object]]:
    made = gymnasium.make("envfarm/FileOps-v0", backend="bwrap")
    try:
        yield made.unwrapped  # type: ignore[misc]
    finally:
        made.close()


def test_a_fork_has_the_state_and_its_own_sandbox(fileops: AgentEnv[object]) -> None:
    with pytest.raises(ForkError, match="reset"):
        fileops.fork()
    fileops.reset(seed=3)
    fileops.step(bash("echo before > mark.txt"))
    twin = fileops.fork()
    try:
        assert twin is not fileops and twin.sandbox is not fileops.sandbox
        assert twin.sandbox is not None and twin.sandbox.parent_id == fileops.sandbox.id  # type: ignore[union-attr]
        assert (twin.steps, twin.transcript, twin.task) == (fileops.steps, fileops.transcript, fileops.task)
        assert twin.transcript is not fileops.transcript
        assert twin.np_random.integers(1 << 30) == fileops.np_random.integers(1 << 30)  # the same RNG state
        twin.step(bash("echo twin > mark.txt; touch only-twin"))
        obs, *_ = fileops.step(bash("cat mark.txt; ls only-twin"))
        assert "before" in obs and "No such file" in obs
        obs, *_ = twin.step(bash("cat mark.txt"))
        assert "twin" in obs
        assert (twin.steps, fileops.steps) == (3, 2)
    finally:
        twin.close()
    obs, *_ = fileops.step(bash("cat mark.txt"))  # closing the fork leaves the original playing
    assert "before" in obs


async def test_an_env_made_with_shared_pools_forks() -> None:
    """gymnasium.make keeps its kwargs (here the live pools) on the env's spec; a fork shares the spec."""
    pools = Pools(size=0)
    made = gymnasium.make("envfarm/ToolCalc-v0", backend="bwrap", pools=pools)
    env: AgentEnv[object] = made.unwrapped  # type: ignore[assignment]
    try:
        await env.areset(seed=0)
        twin = await env.afork()
        try:
            assert twin.spec is env.spec and twin.sandbox is not env.sandbox and twin.task == env.task
        finally:
            await twin.aclose()
    finally:
        await env.aclose()
        await pools.aclose()


@pytest.mark.parametrize("env_id", ["envfarm/ToolCalc-v0", "envfarm/FileOps-v0", "envfarm/OrderDesk-v0",
                                    "envfarm/SqlQuery-v0"])
def test_envs_check_fork_passes(env_id: str) -> None:
    assert "both solved" in check_fork(env_id, "bwrap")


async def test_a_family_that_does_not_fork_says_so() -> None:
    class NoFork(ToolCalcEnv):
        forkable = False

    env = NoFork(backend="bwrap")
    try:
        await env.areset(seed=0)
        with pytest.raises(ForkUnsupported, match="forkable"):
            await env.afork()
    finally:
        await env.aclose()
