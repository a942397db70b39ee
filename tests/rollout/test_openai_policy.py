"""The openai: policy against a real scripted server on loopback: tool calls, tokens, retries, errors."""

from __future__ import annotations

import time
from typing import Any

import pytest
from rollout_support import StubServer, free_port

from envfarm.errors import ConfigError, PolicyError, PolicyUnavailable
from envfarm.rollout.openai_policy import OpenAIPolicy, normalise_base_url, parse_version
from envfarm.rollout.policies import EpisodeView
from envfarm.rollout.policy_spec import make_policy

FAST = {"backoff_s": 0.01, "backoff_max_s": 0.05}


def view(solutions: dict[str, list[dict[str, Any]]], turn: int = 0) -> EpisodeView:
    prompt = next(iter(solutions))
    messages = [{"role": "user", "content": f"Solve this.\n\n{prompt}"}]
    for i in range(turn):
        messages += [{"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}", "type": "function",
                      "function": {"name": "calc", "arguments": "{}"}}]},
                     {"role": "tool", "tool_call_id": f"c{i}", "content": "1"}]
    return EpisodeView(env=None, seed=0, messages=messages, tools=[])  # type: ignore[arg-type]


def test_urls_and_versions() -> None:
    assert normalise_base_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000/v1"
    assert normalise_base_url("http://127.0.0.1:8000/v1/") == "http://127.0.0.1:8000/v1"
    with pytest.raises(ConfigError, match="http"):
        normalise_base_url("127.0.0.1:8000")
    assert [parse_version(v) for v in ("7", 3, "v2", "")] == [7, 3, "v2", None]
    with pytest.raises(ConfigError, match="did you mean 'oracle'"):
        make_policy("oracel")


async def test_tool_calls_tokens_and_version(stub: StubServer, solutions: dict[str, Any]) -> None:
    stub.weight_version = 4
    async with OpenAIPolicy(stub.url) as policy:
        assert policy.model == "stub-model" and policy.weight_version == 4
        reply = await policy.act(view(solutions))
        second = await policy.act(view(solutions, turn=1))
    assert reply.message["tool_calls"][0]["function"]["name"] == "calc"
    assert isinstance(reply.action, dict) and reply.action["tool_calls"]
    assert reply.token_ids == (100, 101, 102) and reply.logprobs == pytest.approx((-0.1, -0.2, -0.3))
    assert reply.weight_version == 4 and reply.finish_reason == "tool_calls"
    assert second.message["tool_calls"][0]["function"]["name"] == "submit"
    sent = stub.bodies[0]
    assert sent["model"] == "stub-model" and sent["logprobs"] is True
    assert sent["messages"][0]["role"] == "user"


async def test_429_and_500_are_retried(stub: StubServer, solutions: dict[str, Any]) -> None:
    stub.fail_next.extend([429, 500, 503])
    async with OpenAIPolicy(stub.url, **FAST) as policy:
        reply = await policy.act(view(solutions))
        assert policy.retries == 3
    assert reply.message["tool_calls"] and stub.requests == 4


async def test_a_slow_answer_times_out_and_is_retried(stub: StubServer, solutions: dict[str, Any]) -> None:
    stub.delay_s = 0.5
    async with OpenAIPolicy(stub.url, timeout_s=0.1, max_retries=1, **FAST) as policy:
        t0 = time.monotonic()
        with pytest.raises(PolicyUnavailable, match=r"no answer within 0\.1s"):
            await policy.act(view(solutions))
        assert time.monotonic() - t0 < 1.0 and policy.retries == 1


async def test_400_is_an_episode_error_and_404_is_fatal(stub: StubServer, solutions: dict[str, Any]) -> None:
    async with OpenAIPolicy(stub.url, **FAST) as policy:
        stub.fail_next.append(400)
        with pytest.raises(PolicyError, match="HTTP 400"):
            await policy.act(view(solutions))
        stub.fail_next.append(404)
        with pytest.raises(PolicyUnavailable, match="wrong URL or model"):
            await policy.act(view(solutions))
        assert policy.retries == 0


async def test_a_server_that_is_down_is_a_clear_error() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    policy = OpenAIPolicy(url, max_retries=2, **FAST)
    with pytest.raises(PolicyUnavailable, match=rf"{url}/models failed 3 times.*Is the server running"):
        await policy.start()
    await policy.aclose()
