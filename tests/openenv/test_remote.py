"""``--env openenv:URL``: envfarm's farm plays OpenEnv servers: envfarm's own (200 oracle episodes, none
lost, spooled), an OpenEnv-native env written with OpenEnv's own base classes, and a server that is down
(an infrastructure error, never a reward of 0)."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from openenv_support import ServerThread, free_port, get_json, wait_until

from envfarm.errors import ConfigError
from envfarm.openenv.server import OpenEnvServeConfig
from envfarm.rollout import CallablePolicy, Farm, FarmConfig, FileSink, Trajectory, make_policy


async def collect(farm: Farm) -> list[Trajectory]:
    return [t async for t in farm.run()]


@pytest.mark.bwrap
@pytest.mark.slow
async def test_farm_plays_200_episodes_of_an_envfarm_server_with_none_lost(tmp_path: Path) -> None:
    server = ServerThread(OpenEnvServeConfig(env_id="envfarm/ToolCalc-v0", backend="bwrap", port=0,
                                             max_sessions=16, expose_oracle=True)).start()
    try:
        config = FarmConfig(env_id=f"openenv:{server.url}", episodes=200, concurrency=16, backend="bwrap",
                            pool_size=1)
        out = tmp_path / "out.jsonl"
        farm = Farm(config, make_policy("oracle"), run_dir=tmp_path / "run", sinks=[FileSink(out)])
        trajs = await collect(farm)
        health = server.health()
    finally:
        server.stop()
    summary = farm.summary()
    assert (summary.episodes_completed, summary.infra_errors, summary.errors, summary.policy_errors) == \
        (200, 0, 0, 0), summary
    assert summary.mean_reward == 1.0 and summary.env_id == f"openenv:{server.url}"
    assert sorted(t.index for t in trajs) == list(range(200))
    assert len(out.read_text().splitlines()) == 200  # every episode delivered from the spool
    t = trajs[0]
    assert t.task_id.startswith("toolcalc-")
    assert {x["function"]["name"] for x in t.tools} == {"calc", "submit"}
    assert t.messages[1]["tool_calls"][0]["function"]["name"] == "calc"
    assert health["sessions"] == 0 and health["pool"]["leased"] == 0, "the farm's sessions all closed"


# ------------------------------------------------------------------------------------------ an OpenEnv env

class GuessAction(Action):
    guess: int


class GuessObservation(Observation):
    prompt: str


class GuessEnv(Environment[GuessAction, GuessObservation, State]):
    """Written against OpenEnv only: say the number in the prompt."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self.target, self._state = 0, State()

    def reset(self, seed: int | None = None, episode_id: str | None = None,
              **kwargs: Any) -> GuessObservation:
        self.target, self._state = (seed or 0) % 97, State(episode_id=episode_id)
        return GuessObservation(prompt=f"Say {self.target} with the step tool.")

    def step(self, action: GuessAction, timeout_s: float | None = None, **kwargs: Any) -> GuessObservation:
        self._state.step_count += 1
        ok = action.guess == self.target
        return GuessObservation(prompt="right" if ok else "wrong", reward=float(ok), done=True)

    @property
    def state(self) -> State:
        return self._state


@pytest.fixture
def guess_server() -> Iterator[str]:
    app = create_fastapi_app(GuessEnv, GuessAction, GuessObservation, max_concurrent_envs=8)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, 30, "the OpenEnv server")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


def say_the_number(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
    number = re.search(r"Say (\d+)", json.loads(messages[-1]["content"])["prompt"])
    assert number and tools[0]["function"]["name"] == "step"
    return json.dumps({"name": "step", "arguments": {"guess": int(number.group(1))}})


@pytest.mark.bwrap
async def test_farm_plays_an_openenv_native_env(guess_server: str) -> None:
    assert "guess" in get_json(guess_server + "/schema")["action"]["properties"]
    config = FarmConfig(env_id=f"openenv:{guess_server}", episodes=24, concurrency=4, backend="bwrap",
                        pool_size=1, seed=100)
    farm = Farm(config, CallablePolicy(say_the_number, name="reader"))
    trajs = await collect(farm)
    assert len(trajs) == 24 and all(t.status == "completed" and t.reward == 1.0 for t in trajs), trajs[0]
    step = trajs[0].tools[0]["function"]
    assert step["parameters"]["properties"]["guess"]["type"] == "integer" and "metadata" not in \
        step["parameters"]["properties"]


@pytest.mark.bwrap
async def test_a_server_that_is_down_is_an_infra_error_not_a_zero() -> None:
    config = FarmConfig(env_id=f"openenv:http://127.0.0.1:{free_port()}", episodes=2, concurrency=2,
                        backend="bwrap", pool_size=1)
    farm = Farm(config, make_policy("oracle"))
    trajs = await collect(farm)
    assert [t.status for t in trajs] == ["infra_error", "infra_error"]
    assert "is it running?" in (trajs[0].infra_error or "") and farm.summary().infra_errors == 2


def test_openenv_ids_need_a_url() -> None:
    with pytest.raises(ConfigError, match="openenv:http://"):
        Farm(FarmConfig(env_id="openenv:", episodes=1, backend="bwrap"), make_policy("oracle"))
