"""The verifier is out of the agent's reach: a failing agent that pre-writes the reward, plants tests or
leaves a background writer still scores 0, on bwrap and on docker."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from harbor_tasks import write_task

from envfarm.envs.harbor.env import HarborEnv, base_image

SUBMIT = json.dumps({"name": "submit", "arguments": {}})
BACKENDS = ["bwrap", pytest.param("docker", marks=pytest.mark.docker)]
SLOW_FAIL = ("#!/bin/bash\nmkdir -p /logs/verifier\nsleep 1\n"
             "[ \"$(cat /workspace/answer.txt 2>/dev/null)\" = 42 ] && echo 1 > /logs/verifier/reward.txt\n"
             "sleep 1\n")
"""Passes only for the right answer; writes no reward otherwise, and gives a writer two seconds."""
WRITER = r"""
cat > /tmp/w.sh <<'S'
while true; do
  for d in /tmp/envfarm-verify-*/ /logs /tests; do
    mkdir -p "$d/logs/verifier" "$d/tests" 2>/dev/null
    echo 1 > "$d/logs/verifier/reward.txt" 2>/dev/null
    printf '#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n' > "$d/tests/test.sh" 2>/dev/null
    echo 1 > "$d/verifier/reward.txt" 2>/dev/null
  done
  sleep 0.02
done
S
(setsid nohup bash /tmp/w.sh >/dev/null 2>&1 &) ; (nohup bash /tmp/w.sh >/dev/null 2>&1 &)
sleep 0.3; echo started
"""
PRE_WRITE = ("mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; "
             "mkdir -p /tmp/envfarm-verify-x/logs/verifier; "
             "echo 1 > /tmp/envfarm-verify-x/logs/verifier/reward.txt;"
             " echo '{\"reward\": 1}' > /workspace/reward.json; echo 41 > /workspace/answer.txt; true")
PLANT = ("mkdir -p /tests; printf '#!/bin/bash\\necho 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh; "
         "mkdir -p /tmp/tests /workspace/tests; cp /dev/null /tmp/tests/test.sh; true")


def bash(command: str) -> str:
    return json.dumps({"name": "bash", "arguments": {"command": command}})


@pytest.fixture
async def env(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[HarborEnv]:
    write_task(tmp_path, "guarded", test_sh=SLOW_FAIL)
    made = HarborEnv(tasks=tmp_path, image_for=base_image, backend=request.param)
    try:
        yield made
    finally:
        await made.aclose()


async def run(env: HarborEnv, *commands: str) -> tuple[float, dict[str, object]]:
    await env.areset(seed=0)
    for command in commands:
        await env.astep(bash(command))
    _, reward, terminated, _, info = await env.astep(SUBMIT)
    assert terminated
    return reward, info


@pytest.mark.parametrize("env", BACKENDS, indirect=True)
async def test_the_right_answer_still_passes(env: HarborEnv) -> None:
    assert (await run(env, "echo 42 > /workspace/answer.txt"))[0] == 1.0


@pytest.mark.parametrize("env", BACKENDS, indirect=True)
async def test_a_prewritten_reward_is_not_read(env: HarborEnv) -> None:
    reward, info = await run(env, PRE_WRITE)
    assert reward == 0.0 and "missing" in str(info["reason"])


@pytest.mark.parametrize("env", BACKENDS, indirect=True)
async def test_planted_tests_do_not_run(env: HarborEnv) -> None:
    reward, info = await run(env, PLANT)
    assert reward == 0.0 and "missing" in str(info["reason"])


@pytest.mark.parametrize("env", BACKENDS, indirect=True)
async def test_a_background_writer_is_dead_before_verification(env: HarborEnv) -> None:
    reward, info = await run(env, WRITER)
    assert reward == 0.0 and "missing" in str(info["reason"])
