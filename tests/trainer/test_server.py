"""`envfarm policy serve` through the official openai SDK on 127.0.0.1: tools, n, logprobs, token ids,
streaming, batching, hot swaps under load, OpenAI-style 400s, and the rollout farm driving it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import openai
import pytest
import torch
from torch import Tensor, nn

from envfarm.trainer.base import VERSION_HEADER, PolicySpec
from envfarm.trainer.chat import BuiltinTemplate
from envfarm.trainer.generate import generate
from envfarm.trainer.policy import Policy, clone_policy, load_policy, save_policy
from envfarm.trainer.server import PolicyServer, ServerConfig
from envfarm.trainer.tokenizer import ByteTokenizer
from envfarm.trainer.weights import encode_state, publish

torch.set_num_threads(2)
TINY = {"d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64, "max_context": 256}
TOOLS = [{"type": "function", "function": {"name": "calc", "description": "Evaluate arithmetic.",
                                           "parameters": {"type": "object", "required": ["expr"],
                                                          "properties": {"expr": {"type": "string"}}}}}]
Served = tuple[PolicyServer, openai.AsyncOpenAI]
USER = [{"role": "user", "content": "What is 3*4? Use calc."}]


def tiny(seed: int = 0) -> Policy:
    return load_policy("tiny-cpu", overrides=TINY, device="cpu", seed=seed)


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    server = PolicyServer(tiny(), ServerConfig(max_tokens=16))
    await server.start("127.0.0.1", 0)
    client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    try:
        yield server, client
    finally:
        await client.close()
        await server.stop()


def recompute(policy: Policy, prompt: list[int], completion: list[int]) -> list[float]:
    with torch.no_grad():
        logp = torch.log_softmax(policy.module(torch.tensor([prompt + completion])).float(), -1)[0]
    return [logp[len(prompt) - 1 + i, t].item() for i, t in enumerate(completion)]


async def test_chat_n2_logprobs_token_ids_and_version(served: Served) -> None:
    server, client = served
    models = await client.models.list()
    assert [m.id for m in models.data] == ["envfarm-tiny-cpu"] and models.data[0].weight_version == 0
    raw = await client.chat.completions.with_raw_response.create(
        model="envfarm-tiny-cpu", messages=USER, tools=TOOLS, n=2, logprobs=True, top_logprobs=3,
        max_tokens=12, temperature=0.9, top_p=0.95, seed=7)
    assert raw.headers[VERSION_HEADER] == "0"
    reply = raw.parse()
    assert reply.weight_version == 0 and reply.prompt_token_ids == server.policy.encode_prompt(USER, TOOLS)
    assert len(reply.choices) == 2
    assert reply.usage.completion_tokens == sum(len(c.token_ids) for c in reply.choices)
    for choice in reply.choices:
        lps = [e.logprob for e in choice.logprobs.content]
        assert len(lps) == len(choice.token_ids) and choice.finish_reason in ("stop", "length")
        assert bytes(b for e in choice.logprobs.content for b in e.bytes) == bytes(
            b for t in choice.token_ids for b in server.policy.tokenizer.token_bytes(t))
        rec = recompute(server.policy, reply.prompt_token_ids, choice.token_ids)
        assert max(abs(a - b) for a, b in zip(rec, lps, strict=True)) < 1e-4
        for e in choice.logprobs.content:
            alts = [a.logprob for a in e.top_logprobs]
            assert len(alts) == 3 and alts == sorted(alts, reverse=True) and e.logprob <= alts[0] + 1e-6
    again = await client.chat.completions.create(model="envfarm-tiny-cpu", messages=USER, tools=TOOLS, n=2,
                                                 max_tokens=12, temperature=0.9, top_p=0.95, seed=7)
    assert [c.token_ids for c in again.choices] == [c.token_ids for c in reply.choices]  # seeded: repeatable


class ScriptedLM(nn.Module):
    """Answers ``script`` whatever the prompt: the token after slot p is script[p - prompt_len + 1]."""

    def __init__(self, script: list[int], prompt_len: int, vocab: int = 262) -> None:
        super().__init__()
        self.script, self.prompt_len, self.vocab = torch.tensor(script), prompt_len, vocab
        self.weight = nn.Parameter(torch.zeros(1))

    def new_cache(self, batch: int, capacity: int) -> SimpleNamespace:
        return SimpleNamespace(length=0)

    def forward(self, input_ids: Tensor, positions: Tensor | None = None, key_mask: Tensor | None = None,
                cache: Any = None, last_only: bool = False) -> Tensor:
        B, T = input_ids.shape
        if positions is None:
            positions = torch.arange(T)[None] + (cache.length if cache is not None else 0)
        if cache is not None:
            cache.length += T
        idx = (positions - self.prompt_len + 1).clamp(0, len(self.script) - 1).expand(B, T)
        logits = torch.full((B, T, self.vocab), -30.0).scatter(2, self.script[idx][..., None], 30.0)
        return logits[:, -1:] if last_only else logits


async def test_tool_calls_plain_and_streamed() -> None:
    tok, tpl = ByteTokenizer(), BuiltinTemplate()
    call = '<tool_call>{"name":"calc","arguments":{"expr":"3*4"}}</tool_call>'
    prompt_len = len(tok.encode(tpl.render_prompt(USER, TOOLS)))
    module = ScriptedLM([*tok.encode("Let me compute. " + call), tok.eos_id], prompt_len)
    policy = Policy(module, tok, tpl, PolicySpec(kind="builtin"), torch.device("cpu"), 256, name="scripted")
    async with PolicyServer(policy) as server:
        client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
        args: dict[str, Any] = {"model": "scripted", "messages": USER, "tools": TOOLS, "logprobs": True}
        reply = await client.chat.completions.create(**args)
        stream = await client.chat.completions.create(stream=True, stream_options={"include_usage": True},
                                                      **args)
        chunks = [c async for c in stream]
        await client.close()
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Let me compute. "
    [tc] = choice.message.tool_calls
    assert tc.type == "function" and tc.function.name == "calc" and json.loads(tc.function.arguments) == {
        "expr": "3*4"} and tc.id.startswith("call_")
    assert choice.token_ids[-1] == tok.eos_id and len(choice.logprobs.content) == len(choice.token_ids)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls = [t for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or []]
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    streamed_ids = [t for c in chunks if c.choices
                    for t in (c.choices[0].model_extra or {}).get("token_ids", [])]
    assert content == "Let me compute. " and "<tool_call>" not in content
    assert [(t.function.name, json.loads(t.function.arguments)) for t in calls] == [("calc", {"expr": "3*4"})]
    assert finishes == ["tool_calls"] and streamed_ids == choice.token_ids
    assert chunks[-1].usage.completion_tokens == len(choice.token_ids)


async def test_stream_matches_plain_reply(served: Served) -> None:
    _, client = served
    args = {"model": "envfarm-tiny-cpu", "messages": USER, "max_tokens": 14, "seed": 3, "logprobs": True,
            "top_logprobs": 2, "n": 2}
    plain = await client.chat.completions.create(**args)
    chunks = [c async for c in await client.chat.completions.create(stream=True, **args)]
    assert all(c.weight_version == 0 for c in chunks) and chunks[0].choices[0].delta.role == "assistant"
    for i, choice in enumerate(plain.choices):
        mine = [c.choices[0] for c in chunks if c.choices and c.choices[0].index == i]
        text = "".join(c.delta.content or "" for c in mine)
        lps = [(e.logprob, e.top_logprobs) for c in mine if c.logprobs for e in c.logprobs.content]
        assert text == choice.message.content
        assert lps == [(e.logprob, e.top_logprobs) for e in choice.logprobs.content]
        assert [c.finish_reason for c in mine if c.finish_reason] == [choice.finish_reason]


async def test_concurrent_requests_share_forward_passes(served: Served) -> None:
    server, client = served
    await client.chat.completions.create(model="envfarm-tiny-cpu", messages=USER, max_tokens=4)  # warm up
    before = dict(vars(server.stats))
    replies = await asyncio.gather(*(client.chat.completions.create(
        model="envfarm-tiny-cpu", messages=[{"role": "user", "content": f"Question {i}?" * (i + 1)}],
        max_tokens=8, temperature=0) for i in range(12)))
    assert len(replies) == 12
    batches = server.stats.batches - before["batches"]
    assert batches <= 4 and server.stats.max_batch_rows >= 4, vars(server.stats)
    passes = server.stats.forward_passes - before["forward_passes"]
    assert passes < 12 * 8  # one-at-a-time would need a prefill + up to 7 decode steps per request
    alone = generate(server.policy, [server.policy.encode_prompt(
        [{"role": "user", "content": "Question 5?" * 6}])], temperature=0, max_tokens=8)
    assert list(alone[0][0].token_ids) == replies[5].choices[0].token_ids  # batch mates change nothing


async def test_hot_swap_under_load(served: Served) -> None:
    server, client = served
    new = tiny(seed=1)
    seen: list[list[int]] = [[] for _ in range(4)]
    stop = asyncio.Event()

    async def worker(k: int) -> None:
        while not stop.is_set() or len(seen[k]) < 2:
            raw = await client.chat.completions.with_raw_response.create(
                model="envfarm-tiny-cpu", messages=USER, max_tokens=6)
            reply = raw.parse()
            assert raw.headers[VERSION_HEADER] == str(reply.weight_version)
            seen[k].append(reply.weight_version)

    async def swap() -> None:
        await asyncio.sleep(0.3)
        result = await publish(server.url, new, 1)
        assert result.version == 1 and result.bytes == len(encode_state(new.module))
        await asyncio.sleep(0.3)
        stop.set()

    async with asyncio.TaskGroup() as tg:
        for k in range(4):
            tg.create_task(worker(k))
        tg.create_task(swap())
    for versions in seen:
        assert versions == sorted(versions) and versions[-1] == 1
    assert any(0 in v for v in seen) and server.stats.swaps == 1
    reply = await client.chat.completions.create(model="envfarm-tiny-cpu", messages=USER, max_tokens=10,
                                                 seed=11)
    g = torch.Generator().manual_seed(11)
    fresh = generate(new, [new.encode_prompt(USER)], max_tokens=10, generator=g)[0][0]
    assert reply.weight_version == 1 and tuple(reply.choices[0].token_ids) == fresh.token_ids


async def test_in_process_swap_and_watched_folder(tmp_path: Path) -> None:
    learner = tiny(seed=0)
    server_policy = clone_policy(learner)
    config = ServerConfig(watch=str(tmp_path / "ckpts"), watch_interval_s=0.05)
    async with PolicyServer(server_policy, config) as server:
        with torch.no_grad():
            learner.module.embed.weight.add_(1.0)  # "training" the original leaves the server's copy alone
        assert not torch.equal(server.policy.module.embed.weight, learner.module.embed.weight)
        await server.swap(learner.module, 1)
        served_emb = server.policy.module.embed.weight
        assert server.version == 1 and torch.equal(served_emb, learner.module.embed.weight)
        later = tiny(seed=5)
        later.version = 2
        save_policy(later, tmp_path / "ckpts" / "step-000200" / "policy")
        for _ in range(100):
            if server.version == 2:
                break
            await asyncio.sleep(0.05)
        assert server.version == 2 and torch.equal(served_emb, later.module.embed.weight)
        async with aiohttp.ClientSession() as http, http.get(server.url + "/v1/models") as resp:
            assert resp.headers[VERSION_HEADER] == "2"
            assert (await resp.json())["data"][0]["weight_version"] == 2


async def test_bad_requests_are_openai_400s(served: Served) -> None:
    server, client = served
    bad: list[dict[str, Any]] = [
        {"model": "gpt-4o", "messages": USER},
        {"model": "envfarm-tiny-cpu", "messages": [{"role": "user", "content": "x" * 300}]},
        {"model": "envfarm-tiny-cpu", "messages": USER, "temperature": -1},
        {"model": "envfarm-tiny-cpu", "messages": USER, "n": 0},
        {"model": "envfarm-tiny-cpu", "messages": []},
        {"model": "envfarm-tiny-cpu", "messages": USER, "top_logprobs": 2},
    ]
    for body in bad:
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(**body)
        assert info.value.body["message"] and info.value.status_code == 400
    async with aiohttp.ClientSession() as http:
        async with http.post(server.url + "/v1/chat/completions", data=b"{not json") as resp:
            assert resp.status == 400 and (await resp.json())["error"]["type"] == "invalid_request_error"
        async with http.post(server.url + "/weights", data=b"garbage", headers={VERSION_HEADER: "5"}) as resp:
            assert resp.status == 400 and "safetensors" in (await resp.json())["error"]["message"]
        other = load_policy("tiny-cpu", overrides={**TINY, "d_model": 64}, device="cpu")
        async with http.post(server.url + "/weights", data=encode_state(other.module)) as resp:
            assert resp.status == 400 and "wrong shape" in (await resp.json())["error"]["message"]
        async with http.get(server.url + "/nowhere") as resp:
            assert resp.status == 404 and "error" in await resp.json() and resp.headers[VERSION_HEADER] == "0"
    assert server.version == 0
    ok = await client.chat.completions.create(model="envfarm-tiny-cpu", messages=USER, max_tokens=2)
    assert ok.choices[0].token_ids


async def test_farm_episodes_carry_tokens_logprobs_and_version(tmp_path: Path) -> None:
    from envfarm.rollout import Farm, FarmConfig, make_policy

    # an untrained model fails every turn: up to 8 turns of ~290 bytes after a ~650-byte prompt
    config = FarmConfig(env_id="envfarm/ToolCalc-v0", episodes=3, concurrency=3, backend="local")
    async with PolicyServer(load_policy("tiny-cpu", overrides={**TINY, "max_context": 4096})) as server:
        policy = make_policy(f"openai:{server.url}/v1", max_tokens=24)
        async with policy:
            trajs = [t async for t in Farm(config, policy, run_dir=tmp_path / "run").run()]
        stats = server.stats
        assert stats.cached_tokens > stats.prompt_tokens / 2  # later turns reuse earlier keys/values
    assert len(trajs) == 3
    for t in trajs:
        assert t.status == "completed", t.error
        assert t.weight_version == 0 and t.turns
        for turn in t.turns:
            assert turn.token_ids and len(turn.token_ids) == len(turn.logprobs or ())
            assert turn.prompt_token_ids and turn.weight_version == 0


@pytest.mark.slow
def test_cli_serve_drives_farm_run(tmp_path: Path) -> None:
    """`envfarm policy serve` in one process, `envfarm farm run --policy openai:...` in another (~20 s)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cli = [sys.executable, "-c", "from envfarm.cli import main; main()"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    serve = [*cli, "policy", "serve", "--preset", "tiny-cpu", "--port", str(port), "--threads", "1"]
    server = subprocess.Popen(serve, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(300):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as resp:
                    assert json.load(resp)["model"] == "envfarm-tiny-cpu"
                    break
            except OSError:
                assert server.poll() is None, server.communicate()
                time.sleep(0.1)
        out = tmp_path / "out.jsonl"
        run = subprocess.run([*cli, "farm", "run", "--env", "envfarm/ToolCalc-v0", "--episodes", "2",
                              "--policy", f"openai:http://127.0.0.1:{port}/v1", "--backend", "local",
                              "--max-tokens", "16", "--trajectories", str(out), "--run-dir",
                              str(tmp_path / "run"), "--quiet"],
                             env=env, capture_output=True, text=True, timeout=240)
        assert run.returncode == 0, run.stderr[-2000:]
        trajs = [json.loads(line) for line in out.read_text().splitlines()]
        assert len(trajs) == 2 and all(t["status"] == "completed" for t in trajs)
        for turn in (turn for t in trajs for turn in t["turns"]):
            assert turn["weight_version"] == 0 and turn["prompt_token_ids"]
            assert len(turn["token_ids"]) == len(turn["logprobs"]) >= 1
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=20)
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
    assert server.returncode == 0, server.stderr.read() if server.stderr else ""
