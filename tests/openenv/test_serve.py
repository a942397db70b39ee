"""``envfarm envs serve``: OpenEnv's own client plays oracle episodes of every built-in env; the wire
format; the refusal past --max-sessions; a session that disconnects gives its sandbox back."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from openenv.core.generic_client import GenericEnvClient
from openenv_support import ServerThread, get_json, play_oracle, wait_until

import envfarm.envs  # noqa: F401 - registers the envs
from envfarm.errors import ConfigError
from envfarm.openenv import server as server_module
from envfarm.openenv.server import OpenEnvServeConfig, build_app, serve

TOOL_USE = ["envfarm/ToolCalc-v0", "envfarm/SqlQuery-v0", "envfarm/FileOps-v0", "envfarm/OrderDesk-v0"]


def _serve(env_id: str, backend: str = "bwrap", **options: object) -> ServerThread:
    config = OpenEnvServeConfig(env_id=env_id, backend=backend, port=0, expose_oracle=True, **options)
    return ServerThread(config).start()


@pytest.fixture
def toolcalc() -> Iterator[ServerThread]:
    server = _serve("envfarm/ToolCalc-v0", max_sessions=2, warm=1)
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.bwrap
@pytest.mark.parametrize("env_id", TOOL_USE)
def test_official_client_plays_oracle_episodes(env_id: str) -> None:
    server = _serve(env_id, max_sessions=4, warm=2)
    try:
        finals = play_oracle(server.url, seeds=[0, 1, 2])
        health = server.health()
    finally:
        server.stop()
    assert [f["reward"] for f in finals] == [1.0, 1.0, 1.0], finals
    assert all(f["done"] and f["terminated"] and not f["truncated"] for f in finals)
    assert health["sessions"] == 0 and health["pool"]["leased"] == 0, health


@pytest.mark.bwrap
def test_wire_format_carries_text_tools_info_and_tool_call_dicts(toolcalc: ServerThread) -> None:
    schema = get_json(toolcalc.url + "/schema")
    assert set(schema["action"]["properties"]) >= {"action"}
    with GenericEnvClient(base_url=toolcalc.url).sync() as client:
        first = client.reset(seed=5)
        obs = first.observation
        assert {t["function"]["name"] for t in obs["tools"]} == {"calc", "submit"}
        assert obs["info"]["task_id"].startswith("toolcalc-") and "tools" not in obs["info"]
        assert first.reward == 0.0 and not first.done
        state = client.state()
        assert state["env_id"] == "envfarm/ToolCalc-v0" and state["step_count"] == 0 and not state["done"]
        bad = client.step({"action": "no tool call here"})
        assert bad.reward == 0.0 and not bad.done and bad.observation["info"]["action_error"] == "parse"
        calc = client.step({"action": {"name": "calc", "arguments": {"expr": "6*7"}}})  # an OpenAI-style dict
        assert calc.observation["text"] == "42" and not calc.done
        final = client.step({"action": {"name": "submit", "arguments": {"answer": "0"}}})
        assert final.done and final.reward == 0.0 and final.observation["info"]["correct"] is False
        after = client.step({"action": "anything"})
        assert after.done and "reset()" in after.observation["text"]
        assert client.state()["step_count"] == 3


@pytest.mark.bwrap
def test_refusal_past_max_sessions_names_the_fix(toolcalc: ServerThread) -> None:
    first, second, third = (GenericEnvClient(base_url=toolcalc.url).sync() for _ in range(3))
    try:
        first.reset(seed=1)
        second.reset(seed=2)
        with pytest.raises(RuntimeError, match=r"CAPACITY_REACHED") as refused:
            third.reset(seed=3)
        assert "--max-sessions 2" in str(refused.value) and "restart the server" in str(refused.value)
        first.close()
        wait_until(lambda: toolcalc.health()["sessions"] == 1, 10, "the closed session to go")
        retry = GenericEnvClient(base_url=toolcalc.url).sync()
        try:
            assert not retry.reset(seed=3).done  # a slot is free again
        finally:
            retry.close()
    finally:
        for client in (first, second, third):
            client.close()


@pytest.mark.bwrap
def test_disconnect_releases_the_sandbox(toolcalc: ServerThread) -> None:
    client = GenericEnvClient(base_url=toolcalc.url).sync()
    client.reset(seed=4)
    health = toolcalc.health()
    assert health["sessions"] == 1 and health["pool"]["leased"] == 1 and health["open_envs"] == 1, health
    client.disconnect()  # the socket goes away mid-episode, no "close" message
    gone = wait_until(lambda: (h := toolcalc.health())["sessions"] == 0 and h["pool"]["leased"] == 0 and h,
                      15, "the session and its lease to go")
    assert gone["open_envs"] == 0
    client.close()


@pytest.mark.bwrap
def test_a_cancelled_serve_closes_its_pool_before_it_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cancelling ``serve()`` stops uvicorn the graceful way, so the lifespan closes the pool before serve
    returns, not later under asyncio.run's final cancel of every task (where a sandbox start that is
    connecting its pipes never finishes on Python 3.11)."""
    apps: list[Any] = []

    def capture(config: OpenEnvServeConfig) -> Any:
        apps.append(build_app(config))
        return apps[-1]

    monkeypatch.setattr(server_module, "build_app", capture)

    async def main() -> dict[str, Any]:
        up = asyncio.Event()
        config = OpenEnvServeConfig(env_id="envfarm/ToolCalc-v0", backend="bwrap", port=0, warm=2)
        task = asyncio.create_task(serve(config, lambda url: up.set()))
        await asyncio.wait_for(up.wait(), 120)
        host = apps[0].state.envfarm_host
        await asyncio.to_thread(wait_until, lambda: host.health()["pool"]["idle"] == 2, 60, "a warm pool")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return dict(host.health()["pool"])

    pool = asyncio.run(main())
    assert pool["live"] == 0 and pool["idle"] == 0 and pool["starting"] == 0, pool


def test_unknown_env_and_bad_kwargs_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="did you mean 'envfarm/ToolCalc-v0'"):
        build_app(OpenEnvServeConfig(env_id="envfarm/ToolCal-v0"))
    with pytest.raises(ConfigError, match="does not take the env arguments"):
        build_app(OpenEnvServeConfig(env_id="envfarm/ToolCalc-v0", env_kwargs={"no_such_argument": 1}))
    with pytest.raises(ValueError, match="extra"):
        OpenEnvServeConfig(env_id="envfarm/ToolCalc-v0", max_session=3)  # type: ignore[call-arg]


@pytest.mark.docker
@pytest.mark.slow
def test_code_repair_on_docker_over_the_official_client() -> None:
    task = "envfarm__lrucache-get-does-not-refresh"
    server = _serve("envfarm/CodeRepair-v0", backend="docker", max_sessions=1, warm=0,
                    env_kwargs={"instance_ids": [task]})
    try:
        [final] = play_oracle(server.url, seeds=[0], options={"instance_id": task})
    finally:
        server.stop()
    assert final["reward"] == 1.0 and final["terminated"] and final["info"]["resolved"], final
