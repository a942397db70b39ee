"""CodeRepair-v0 under attack: the forgery suite (envfarm.testing.exploits) played as real episodes on docker.

The policy writes each forgery into the workspace with its own bash tool and submits; the env grades the
workspace diff with the harness (tamper rules + canary tests). No forgery of any class may earn reward.
Hidden tests that hang are the policy's failure: reward 0, reason ``timeout``, no infra error.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import gymnasium
import pytest

import envfarm.envs  # noqa: F401 - registers the envs
from envfarm.envs.code_repair.env import CodeRepairEnv
from envfarm.testing.exploits import Exploit, Target, exploits_for

pytestmark = [pytest.mark.docker, pytest.mark.slow]

TASK = "envfarm__lrucache-resize-off-by-one"
TARGET = Target("pytest", "lrucache/__init__.py")
APPLY = """\
import base64, json, os
for path, kind, text in json.loads(base64.b64decode({blob!r})):
    if kind == "symlink":
        if os.path.lexists(path):
            os.remove(path)
        os.symlink(text, path)
        continue
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    old = open(path).read() if kind != "create" and os.path.exists(path) else ""
    new = {{"create": text, "append": old + text, "prepend": text + old}}[kind]
    with open(path, "w") as fh:
        fh.write(new)
"""


def call(name: str, **arguments: Any) -> str:
    return json.dumps({"name": name, "arguments": arguments})


def write_forgery(exploit: Exploit) -> str:
    """A bash action that makes the exploit's edits in the workspace."""
    edits: list[tuple[str, str, str]] = [(e.path, e.kind, e.text) for e in exploit.edits]
    if exploit.symlink:
        edits.append((exploit.symlink[0], "symlink", exploit.symlink[1]))
    blob = base64.b64encode(json.dumps(edits).encode()).decode()
    return call("bash", command=f"python3 - <<'EOF'\n{APPLY.format(blob=blob)}EOF")


@pytest.fixture(scope="module")
def env() -> Iterator[CodeRepairEnv]:
    made = gymnasium.make("envfarm/CodeRepair-v0", backend="docker", grade_timeout_s=20)
    try:
        yield made.unwrapped  # type: ignore[misc]
    finally:
        made.close()


def play(env: CodeRepairEnv, actions: list[str]) -> tuple[float, dict[str, Any], list[str]]:
    env.reset(options={"instance_id": TASK})
    reward, info, seen = 0.0, {}, []
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        seen.append(obs)
        if terminated or truncated:
            break
    return float(reward), info, seen


@pytest.mark.parametrize("forgery_class", (1, 2, 3, 4))
def test_no_forgery_earns_reward(env: CodeRepairEnv, forgery_class: int) -> None:
    chosen = [e for e in exploits_for(TARGET) if e.forgery_class == forgery_class]
    assert chosen
    for exploit in chosen:
        reward, info, seen = play(env, [write_forgery(exploit), call("submit")])
        assert "infra_error" not in info, (exploit.name, info)
        assert reward == 0.0 and not info.get("resolved"), (exploit.name, info.get("findings"), seen[-1])
        assert info.get("patch"), f"{exploit.name} changed nothing in the workspace: {seen[0]}"


def test_the_oracle_still_earns_reward_with_canaries(env: CodeRepairEnv) -> None:
    env.reset(options={"instance_id": TASK})
    reward, info, _ = play(env, env.oracle())
    assert reward == 1.0 and info["resolved"] and info["findings"] == []


def test_hidden_tests_that_hang_are_a_model_failure_not_an_infra_error(env: CodeRepairEnv) -> None:
    hang = ("python3 - <<'EOF'\nimport pathlib\np = pathlib.Path('lrucache/__init__.py')\n"
            "p.write_text(p.read_text() + '\\nwhile True:\\n    pass\\n')\nEOF")
    reward, info, seen = play(env, [call("bash", command=hang), call("submit")])
    assert reward == 0.0 and info["reason"] == "timeout" and "infra_error" not in info, info
    assert "unpatched base finishes in" in seen[-1]
