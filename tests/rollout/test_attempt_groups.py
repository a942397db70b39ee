"""Groups from one state: the attempts at a task start on forks of one prepared env (FileOps on bwrap)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from envfarm.envs.core import AgentEnv
from envfarm.envs.tool_use.fileops import FileOpsEnv
from envfarm.errors import ForkError
from envfarm.rollout import EpisodeView, Farm, FarmConfig, Policy, Reply, Trajectory, make_policy
from envfarm.rollout.policies import text_reply

FILEOPS = "envfarm/FileOps-v0"
TASKS, ATTEMPTS = 2, 4


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """Counts FileOps resets and forks, and keeps every fork to check that it was closed."""
    seen: dict[str, Any] = {"resets": 0, "forks": []}
    areset, afork = FileOpsEnv.areset, FileOpsEnv.afork

    async def counting_reset(self: FileOpsEnv, **kw: Any) -> Any:
        seen["resets"] += 1
        return await areset(self, **kw)

    async def counting_fork(self: FileOpsEnv) -> Any:
        twin = await afork(self)
        seen["forks"].append(twin)
        return twin

    monkeypatch.setattr(FileOpsEnv, "areset", counting_reset)
    monkeypatch.setattr(FileOpsEnv, "afork", counting_fork)
    yield seen


async def run(tmp_path: Path, policy: Policy, name: str = "run", **kw: Any) -> list[Trajectory]:
    config = FarmConfig(env_id=FILEOPS, episodes=TASKS * ATTEMPTS, attempts=ATTEMPTS, concurrency=3,
                        backend="bwrap", seed=5, **kw)
    farm = Farm(config, policy, run_dir=tmp_path / name)
    return sorted([t async for t in farm.run()], key=lambda t: t.index)


def bash(command: str) -> str:
    return json.dumps({"name": "bash", "arguments": {"command": command}})


class MarkPolicy(Policy):
    """Leaves a mark of its own in the workspace, counts the marks there, submits."""

    name = "mark"

    async def act(self, view: EpisodeView) -> Reply:
        script = [bash("mktemp mark-XXXXXX >/dev/null"), bash("echo marks=$(ls mark-* | wc -l)"),
                  json.dumps({"name": "submit", "arguments": {}})]
        return text_reply(script[view.step], view)


@pytest.mark.bwrap
async def test_a_group_resets_once_and_forks_the_rest(tmp_path: Path, counts: dict[str, Any]) -> None:
    trajs = await run(tmp_path, make_policy("oracle"))
    assert [t.status for t in trajs] == ["completed"] * TASKS * ATTEMPTS
    assert all(t.reward == 1.0 for t in trajs)
    assert counts["resets"] == TASKS and len(counts["forks"]) == TASKS * (ATTEMPTS - 1)
    assert all(twin.sandbox is None for twin in counts["forks"])  # each fork ended, its sandbox closed
    assert {t.seed for t in trajs} == {5, 6} and all(t.timings.grade_s > 0 for t in trajs)


@pytest.mark.bwrap
async def test_attempts_do_not_see_each_others_writes(tmp_path: Path, counts: dict[str, Any]) -> None:
    trajs = await run(tmp_path, MarkPolicy())
    assert len(counts["forks"]) == TASKS * (ATTEMPTS - 1)
    for t in trajs:
        assert "marks=1" in t.turns[1].observation, (t.index, t.turns[1].observation)


@pytest.mark.bwrap
async def test_rewards_and_transcripts_match_independent_resets(tmp_path: Path,
                                                                 counts: dict[str, Any]) -> None:
    for policy in (make_policy("oracle"), make_policy("random")):
        grouped = await run(tmp_path, policy, f"grouped-{policy.name}")
        alone = await run(tmp_path, policy, f"alone-{policy.name}", fork_groups=False)
        assert [t.reward for t in grouped] == [t.reward for t in alone]
        assert [t.messages for t in grouped] == [t.messages for t in alone]
        assert [t.task_id for t in grouped] == [t.task_id for t in alone]
    assert counts["resets"] == 2 * (TASKS + TASKS * ATTEMPTS)


@pytest.mark.bwrap
async def test_a_failed_fork_costs_only_its_attempt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    afork: Callable[[AgentEnv[Any]], Any] = FileOpsEnv.afork
    failed: list[int] = []

    async def flaky_fork(self: FileOpsEnv) -> Any:
        if not failed:
            failed.append(1)
            raise ForkError("the layer store is full (injected)")
        return await afork(self)

    monkeypatch.setattr(FileOpsEnv, "afork", flaky_fork)
    trajs = await run(tmp_path, make_policy("oracle"), max_retries=0)
    assert [t.status for t in trajs].count("infra_error") == 1
    broken = next(t for t in trajs if t.status == "infra_error")
    assert "injected" in (broken.infra_error or "") and broken.reward == 0.0
    assert all(t.reward == 1.0 for t in trajs if t is not broken)
    failed.clear()
    retried = await run(tmp_path, make_policy("oracle"), "retried")  # max_retries=1: a fresh reset
    assert all(t.status == "completed" and t.reward == 1.0 for t in retried)
    assert sorted(t.retries for t in retried) == [0] * (TASKS * ATTEMPTS - 1) + [1]


@pytest.mark.bwrap
async def test_a_stopped_run_closes_the_prepared_envs(tmp_path: Path, counts: dict[str, Any],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    prepared: list[FileOpsEnv] = []
    areset = FileOpsEnv.areset  # the counting one

    async def keeping(self: FileOpsEnv, **kw: Any) -> Any:
        prepared.append(self)
        return await areset(self, **kw)

    monkeypatch.setattr(FileOpsEnv, "areset", keeping)
    config = FarmConfig(env_id=FILEOPS, episodes=3 * ATTEMPTS, attempts=ATTEMPTS, concurrency=2,
                        backend="bwrap")
    async with contextlib.aclosing(Farm(config, make_policy("oracle"), run_dir=tmp_path / "run").run()) as it:
        async for _ in it:
            break
    assert len(prepared) >= 2  # the first task's env and the next one's, prepared ahead
    assert all(env.sandbox is None for env in prepared + counts["forks"])
