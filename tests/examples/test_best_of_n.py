"""examples/best_of_n.py, run as a library on bwrap: a prefix played once, N children forked from its state,
the best kept; a depth-2 tree forks again from a child's kept state. Children see the prefix's files and
never a sibling's; every sandbox is closed at the end."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from envfarm.rollout import CallablePolicy, EpisodeView, Policy, Reply
from envfarm.rollout.policies import text_reply

TESTS = Path(__file__).resolve().parents[1]
EXAMPLE = TESTS.parent / "examples" / "best_of_n.py"


def _load(name: str, path: Path) -> ModuleType:
    """The module at ``path`` (a script, or a test helper of another folder), imported as ``name`` once."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = sys.modules[name] = importlib.util.module_from_spec(spec)  # its dataclasses look it up
    spec.loader.exec_module(module)
    return module


example = _load("best_of_n", EXAMPLE)


@pytest.mark.bwrap
def test_best_of_n_beats_one_noisy_attempt_on_code_repair(capsys: pytest.CaptureFixture[str]) -> None:
    result = example.main(["--backend", "bwrap", "--n", "4", "--depth", "2", "--slip", "0.5",
                           "--policy-seed", "1"])
    out = capsys.readouterr().out
    first, second = result.levels
    assert [c.label for c in first] == ["1.1", "1.2", "1.3", "1.4"]
    assert all(c.parent == "prefix" and c.start_step == 1 for c in first)
    parent = next(c for c in first if c.label == second[0].parent)
    assert len(second) == 4 and all(c.parent == parent.label and c.start_step == 2 for c in second)
    assert result.prefix == ("create",)  # the oracle's first action: the gold patch written to a file
    for child in result.children:
        assert child.error is None and child.reward is not None
        start = parent.episode[:2] if child in second else result.prefix
        assert child.episode[:len(start)] == start, child
    rewards = [c.reward for c in result.children]
    assert result.best is not None and result.best.reward == max(rewards)
    assert min(c.reward for c in first) < 1.0 == max(c.reward for c in first), "seeded: some slip, some win"
    assert any(c.actions[0] == "bash" and c.reward == 1.0 for c in first), "the prefix's patch applied"
    assert result.sandboxes_left == 0
    assert "noisy oracle" in out and "sandboxes open after closing every env: 0" in out
    assert f"chosen: child {result.best.label}" in out and "a fresh env reset and the prefix replayed" in out


def bash(command: str) -> str:
    return json.dumps({"name": "bash", "arguments": {"command": command}})


class Probe(Policy):
    """Twice: make a file of its own name in /tmp and list /tmp; then submit (an empty diff: no grading)."""

    name = "probe"

    async def act(self, view: EpisodeView) -> Reply:
        if view.step >= 3:
            return text_reply(json.dumps({"name": "submit", "arguments": {}}), view)
        mine = f"c-{int(view.rng.integers(1 << 40))}"
        return text_reply(bash(f"touch /tmp/{mine} && echo made {mine} && cat /tmp/mark && ls /tmp"), view)


def probes(child: Any) -> list[tuple[str, set[str]]]:
    """(the file a probe made, the probe files it saw) for each probe of ``child``."""
    found = []
    for obs in child.observations:
        made = re.search(r"made (c-\d+)", obs)
        if made is not None:
            assert "prefix was here" in obs, obs
            found.append((made.group(1), set(re.findall(r"^(c-\d+)$", obs, re.M))))
    return found


@pytest.mark.bwrap
async def test_children_start_from_the_prefix_and_never_see_a_sibling() -> None:
    config = example.SearchConfig(backend="bwrap", n=3, depth=2, branch_steps=1)
    prefix = CallablePolicy(lambda messages, tools: bash("echo prefix was here > /tmp/mark"))
    result = await example.search(config, prefix, Probe())
    first, second = result.levels
    made: dict[str, list[str]] = {}
    for child in first:  # probe 1 sees its own file only; probe 2 its two
        (a, seen_a), (b, seen_b) = probes(child)
        assert (seen_a, seen_b) == ({a}, {a, b}), child.observations
        made[child.label] = [a, b]
    assert len({f for files in made.values() for f in files}) == 6
    parent = made[second[0].parent]
    for child in second:  # forked after the parent's first probe: sees that file, not its second one
        ((c, seen),) = probes(child)
        assert seen == {parent[0], c} and c not in {f for files in made.values() for f in files}
        made[child.label] = [c]
    assert result.sandboxes_left == 0
    assert all(c.reward == 0.0 for c in result.children) and result.best in result.children


@pytest.mark.bwrap
async def test_an_openai_compatible_policy_plays_prefix_and_children() -> None:
    support = _load("rollout_support", TESTS / "rollout" / "rollout_support.py")
    stub = support.StubServer(support.toolcalc_solutions([5]))
    url = await stub.start()
    try:
        args = example.parse_args(["--env", "envfarm/ToolCalc-v0", "--backend", "bwrap", "--seed", "5",
                                   "--n", "3", "--base-url", url])
        result = await example.run(args)
    finally:
        await stub.stop()
    assert result.prefix == ("calc",) and result.policy.startswith("openai:")
    assert [(c.actions, c.reward) for c in result.children] == [(("submit",), 1.0)] * 3
    assert stub.completions == 4  # the prefix once, then one turn a child
    for body in stub.bodies[1:]:  # each child asked with the prefix's transcript: prompt, calc, its result
        roles = [m["role"] for m in body["messages"]]
        assert roles == ["user", "assistant", "tool"], roles
    assert result.sandboxes_left == 0
