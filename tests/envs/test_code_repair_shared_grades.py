"""CodeRepair's shared grades: forks of one prepared env that submit the same diff share its one grading."""

from __future__ import annotations

import json
from typing import Any

import pytest

import envfarm.envs.code_repair.env as code_repair
from envfarm.envs.code_repair.env import CodeRepairEnv


async def finish(env: CodeRepairEnv, actions: list[str]) -> tuple[float, dict[str, Any]]:
    reward, info = 0.0, {}
    for action in actions:
        _, reward, terminated, _, info = await env.astep(action)
        if terminated:
            break
    return reward, info


@pytest.mark.bwrap
@pytest.mark.parametrize("share", [True, False])
async def test_forks_share_the_grading_of_one_patch(monkeypatch: pytest.MonkeyPatch, share: bool) -> None:
    runs: list[str | None] = []
    real = code_repair.run_attempt

    async def counting(*args: Any, **kw: Any) -> Any:
        runs.append(args[4])  # the patch
        return await real(*args, **kw)

    monkeypatch.setattr(code_repair, "run_attempt", counting)
    env = CodeRepairEnv(backend="bwrap", share_grades=share)
    forks: list[CodeRepairEnv] = []
    try:
        await env.areset(seed=0)
        forks = [await env.afork() for _ in range(3)]
        oracle = env.oracle()
        other = json.dumps({"name": "bash", "arguments": {"command": "echo '# noted' >> README.md"}})
        results = [await finish(f, oracle) for f in forks[:2]]
        results.append(await finish(forks[2], [other, *oracle]))  # one more byte: its own grading
        results.append(await finish(env, oracle))
    finally:
        for f in forks:
            await f.aclose()
        await env.aclose()
    assert [r for r, _ in results] == [1.0] * 4
    assert [bool(i.get("grade_shared")) for _, i in results] == ([False, True, False, True] if share else
                                                                 [False] * 4)
    assert len(runs) == (2 if share else 4)
