"""envfarm/Harbor-v0 episodes on small task folders: oracle 1, no-op 0, reward.json, missing and garbled
rewards, verifier timeout, limits, internet, and the conformance suite (bwrap; the docker ones marked)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from harbor_tasks import write_task

import envfarm.envs  # noqa: F401 - registers the envs
from envfarm.envs import register
from envfarm.envs.checks import run_conformance
from envfarm.envs.harbor.env import HarborEnv, base_image
from envfarm.envs.harbor.verifier import parse_reward, rewrite_paths

SUBMIT = json.dumps({"name": "submit", "arguments": {}})
BACKENDS = ["bwrap", pytest.param("docker", marks=pytest.mark.docker)]
TASKS = Path(__file__).parent / "tasks"


def bash(command: str) -> str:
    return json.dumps({"name": "bash", "arguments": {"command": command}})


async def play(env: HarborEnv, actions: list[str], **reset: Any) -> tuple[float, dict[str, Any]]:
    await env.areset(**({"seed": 0} | reset))
    reward, info = 0.0, {}
    for action in actions:
        _, reward, terminated, truncated, info = await env.astep(action)
        if terminated or truncated:
            break
    return reward, info


@pytest.fixture
async def make_env(tmp_path: Path) -> AsyncIterator[Any]:
    made: list[HarborEnv] = []

    def make(backend: str = "bwrap", **kwargs: Any) -> HarborEnv:
        env = HarborEnv(tasks=kwargs.pop("tasks", tmp_path), image_for=base_image, backend=backend, **kwargs)
        made.append(env)
        return env

    yield make
    for env in made:
        await env.aclose()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_oracle_scores_1_and_noop_scores_0(tmp_path: Path, make_env: Any, backend: str) -> None:
    write_task(tmp_path, "answer")
    env = make_env(backend)
    obs, info = await env.areset(seed=0)
    assert obs.startswith("Task answer") and info["task_id"] == "answer"
    reward, info = await play(env, env.oracle())
    assert reward == 1.0 and info["reason"] is None and info["rewards"] == {"reward": 1.0}
    reward, info = await play(env, [SUBMIT])
    assert reward == 0.0 and info["reason"] is None


async def test_reward_json_missing_and_garbled_rewards(tmp_path: Path, make_env: Any) -> None:
    write_task(tmp_path, "a-json", test_sh='#!/bin/bash\nmkdir -p /logs/verifier\n'
               'echo \'{"reward": 0.5, "style": 1}\' > /logs/verifier/reward.json\n')
    write_task(tmp_path, "b-missing", test_sh="#!/bin/bash\necho tests ran\nmkdir -p /logs/verifier\n"
               "echo 'FAILED t.py::x' > /logs/verifier/test-stdout.txt\nexit 1\n")
    write_task(tmp_path, "c-garbled", test_sh="#!/bin/bash\nmkdir -p /logs/verifier\n"
               "echo lots > /logs/verifier/reward.txt\n")
    write_task(tmp_path, "d-env", test_sh='#!/bin/bash\nmkdir -p /logs/verifier\n'
               '[ "$GREETING" = hello ] && echo 1 > /logs/verifier/reward.txt\n')
    env = make_env()
    reward, info = await play(env, [SUBMIT], seed=0)
    assert reward == 0.5 and info["rewards"] == {"reward": 0.5, "style": 1.0}
    assert info["reward_source"] == "reward.json"
    reward, info = await play(env, [SUBMIT], seed=1)
    assert reward == 0.0 and "missing" in info["reason"] and "tests ran" in info["verifier_output"]
    assert info["verifier_output"].endswith("test-stdout.txt ---\nFAILED t.py::x\n")
    assert "infra_error" not in info
    reward, info = await play(env, [SUBMIT], seed=2)
    assert reward == 0.0 and "garbled reward.txt" in info["reason"]
    reward, info = await play(env, [SUBMIT], seed=3)
    assert reward == 1.0, info


async def test_verifier_timeout_is_reward_0_with_a_reason(tmp_path: Path, make_env: Any) -> None:
    write_task(tmp_path, "slow", verifier_timeout=1.0, test_sh="#!/bin/bash\nmkdir -p /logs/verifier\n"
               "echo 1 > /logs/verifier/reward.txt\nsleep 30\n")
    reward, info = await play(make_env(), [SUBMIT])
    assert reward == 0.0 and "verifier timeout" in info["reason"]


async def test_step_limit_runs_the_verifier(tmp_path: Path, make_env: Any) -> None:
    write_task(tmp_path, "limit")
    env = make_env(max_episode_steps=1)
    await env.areset(seed=0)
    _, reward, terminated, truncated, info = await env.astep(bash("echo 42 > /workspace/answer.txt"))
    assert (reward, terminated, truncated, info["step_limit"]) == (1.0, False, True, True)


def test_limits_and_internet_come_from_task_toml(tmp_path: Path) -> None:
    write_task(tmp_path, "big", memory_mb=3000, internet=True)
    env = HarborEnv(tasks=tmp_path, image_for=base_image)
    limits = env.limits_for(env.tasks[0])
    assert (limits.cpus, limits.memory_mb, limits.disk_mb) == (1.0, 3000, 256)
    env.task = env.tasks[0]
    assert env._info()["internet_requested"] is True


def test_a_task_without_solution_has_only_submit_as_oracle(tmp_path: Path) -> None:
    write_task(tmp_path, "nosol", solve=False)
    env = HarborEnv(tasks=tmp_path, image_for=base_image)
    env.task = env.tasks[0]
    assert env.oracle() == [SUBMIT]


def test_paths_are_rewritten_only_where_a_path_starts() -> None:
    got = rewrite_paths("pytest /tests/t.py /app/tests/x > /logs/verifier/o 'cd /tests'",
                        {"/tests": "/tmp/v/tests", "/logs": "/tmp/v/logs"})
    assert got == "pytest /tmp/v/tests/t.py /app/tests/x > /tmp/v/logs/verifier/o 'cd /tmp/v/tests'"


@pytest.mark.parametrize(("text", "reward", "why"), [
    ("txt\n0.25\n", 0.25, None), ("json\n{\"a\": 1}", 1.0, None), ("json\n{\"a\": 1, \"b\": 0}", 0.5, None),
    ("json\n{\"a\": \"x\"}", 0.0, "garbled"), ("json\n[1]", 0.0, "garbled"), ("txt\nnan", 0.0, "finite"),
    ("empty\n", 0.0, "empty"), ("none\n", 0.0, "missing"),
])
def test_parse_reward(text: str, reward: float, why: str | None) -> None:
    got, _, reason = parse_reward(text)
    assert got == reward and (reason is None if why is None else why in reason)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_fork_mid_episode_is_independent_and_solves(tmp_path: Path, make_env: Any,
                                                            backend: str) -> None:
    """A fork after part of the oracle's actions: the same state, its own sandbox, and both finish with
    reward 1; a file one writes is not seen by the other."""
    write_task(tmp_path, "answer")
    env = make_env(backend)
    await env.areset(seed=0)
    actions = env.oracle()
    for action in actions[:-2]:
        await env.astep(action)
    twin = await env.afork()
    try:
        assert (twin.task, twin.steps, twin.transcript) == (env.task, env.steps, env.transcript)
        await twin.astep(bash("echo twin > /workspace/only-twin"))
        obs, *_ = await env.astep(bash("ls /workspace/only-twin"))
        assert "No such file" in obs
        for played in (twin, env):
            rewards = [(await played.astep(a))[1] for a in actions[-2:]]
            assert rewards[-1] == 1.0, played.transcript[-1]
    finally:
        await twin.aclose()


def test_conformance_on_bwrap() -> None:
    register("tests/HarborTiny-v0", HarborEnv, tasks=str(TASKS), image_for=base_image)
    report = run_conformance("tests/HarborTiny-v0", backend="bwrap", seeds=2, leak_episodes=2, vector=False)
    assert report.passed, report.failures


def test_conformance_says_when_a_task_has_no_oracle(tmp_path: Path) -> None:
    """envs check on a folder where one task lacks solution/solve.sh: the oracle check counts it and still
    holds the others to the bar; a one-task env passes determinism (every seed is that task)."""
    write_task(tmp_path, "with-solution")
    write_task(tmp_path, "without-solution", solve=False)
    kwargs = {"tasks": str(tmp_path), "image_for": base_image}
    report = run_conformance("envfarm/Harbor-v0", backend="bwrap", seeds=4, leak_episodes=1, vector=False,
                             env_kwargs=kwargs)
    oracle = next(r for r in report.results if r.name == "oracle")
    assert report.passed, report.failures
    assert "oracle solved 2/2 seeds" in oracle.detail and "no oracle for 2 of 4 seeds" in oracle.detail
    alone = {"tasks": str(tmp_path / "without-solution"), "image_for": base_image}
    report = run_conformance("envfarm/Harbor-v0", backend="bwrap", seeds=1, leak_episodes=1, vector=False,
                             env_kwargs=alone)
    results = {r.name: r.detail for r in report.results}
    assert report.passed, report.failures
    assert results["oracle"].startswith("no oracle") and "one task" in results["determinism"]


@pytest.mark.docker
@pytest.mark.parametrize("backend", ["docker", "bwrap"])
async def test_the_task_image_from_its_dockerfile(tmp_path: Path, backend: str) -> None:
    folder = write_task(tmp_path, "built")
    (folder / "environment" / "Dockerfile").write_text(
        "FROM python:3.11-slim\nENV MARK=from-dockerfile\nWORKDIR /workspace\n")
    env = HarborEnv(tasks=tmp_path, backend=backend)  # the default image_for: ensure_task_image
    try:
        await env.areset(seed=0)
        _, _, _, _, _ = await env.astep(bash("test \"$MARK\" = from-dockerfile && pwd"))
        assert "/workspace" in env.transcript[-1] and "exit code" not in env.transcript[-1]
        assert (await play(env, env.oracle()))[0] == 1.0
        assert (await play(env, [SUBMIT]))[0] == 0.0
    finally:
        await env.aclose()


UVX_TEST_SH = """#!/bin/bash
set +e
mkdir -p /logs/verifier
uvx --python 3.12 --with pytest==8.3.3 \\
    pytest /tests/test_outputs.py -rA > /logs/verifier/test-stdout.txt 2>&1
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""
UVX_TEST = """def test_answer():
    assert open("/app/answer.txt").read().strip() == "42"
"""


@pytest.mark.docker
@pytest.mark.parametrize("backend", ["docker", "bwrap"])
async def test_a_task_in_app_graded_with_uvx_offline(tmp_path: Path, backend: str) -> None:
    """A task as Harbor datasets write them: WORKDIR /app (the root is read-only here: /app is the seeded
    workspace folder) and tests run by ``uvx --with pytest==...`` (fetched at grading time on Harbor; here
    installed when the image is built). The oracle scores 1, a no-op 0."""
    folder = write_task(tmp_path, "in-app", test_sh=UVX_TEST_SH, extra_tests={"test_outputs.py": UVX_TEST})
    (folder / "environment" / "Dockerfile").write_text(
        "FROM python:3.12-slim\nWORKDIR /app\nRUN mkdir -p /app/data && echo seed > /app/data/x\n")
    solve = "#!/bin/bash\ncat /app/data/x && echo 42 > /app/answer.txt\n"
    (folder / "solution" / "solve.sh").write_text(solve)
    env = HarborEnv(tasks=tmp_path, backend=backend)
    try:
        await env.areset(seed=0)
        reward, info = await play(env, env.oracle())
        assert reward == 1.0, info.get("verifier_output")
        assert (await play(env, [SUBMIT]))[0] == 0.0
    finally:
        await env.aclose()
