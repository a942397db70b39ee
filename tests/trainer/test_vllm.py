"""``envfarm policy serve --engine vllm`` drives a real vLLM server (from .venv-vllm, which `make setup`
creates),
started once for this module on a tiny random Qwen2 (head size 32: vLLM's CPU attention needs 32..512).

The server starts on weights W1, so its first answers are a fresh server's on W1. Publishing W0 and then W1
again reloads in place (with the prompts cached under W0 in between): the greedy answers must be the fresh
server's again, token for token. Replies carry the weight version, token ids and logprobs equal to a
transformers forward; requests in flight during a reload finish on one version, the one their reply names.
The fast tests check the refusals (head size, no checkpoint, no engine) without starting vLLM."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import torch
import transformers
from typer.testing import CliRunner

from envfarm.cli import app
from envfarm.errors import ConfigError, EngineStartError
from envfarm.rollout.openai_policy import OpenAIPolicy
from envfarm.rollout.policies import EpisodeView
from envfarm.testing.tiny_hf import tiny_qwen2
from envfarm.trainer.learner import Learner, LearnerConfig
from envfarm.trainer.logprob_check import logprob_mismatch
from envfarm.trainer.policy import load_policy
from envfarm.trainer.samples import TokenSample
from envfarm.trainer.train_config import TrainConfig
from envfarm.trainer.vllm_front import checkpoint_state
from envfarm.trainer.vllm_process import (
    PYTHON_ENV,
    VLLMConfig,
    VLLMProcess,
    check_model,
    descendants,
    free_port,
)
from envfarm.trainer.weights import publish

PROMPTS = ["What is 3*4?", "A shop sells 17 apples and 25 pears. How many fruits?", "Compute 9 - 2.", "hi"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def variant(base: Path, out: Path, seed: int, std: float = 0.3) -> Path:
    """``base`` with every matrix redrawn N(0, std) from ``seed``: logits far from ties, so greedy decoding
    is the same whatever the batch (the top two logits differ by >= 0.03 on these prompts)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=gen) * std)
    model.save_pretrained(str(out))
    transformers.AutoTokenizer.from_pretrained(str(base)).save_pretrained(str(out))
    return out


# ------------------------------------------------------------------------------ without an engine (fast)


def test_head_size_outside_the_cpu_kernel_is_refused_before_start(tmp_path: Path) -> None:
    model = tiny_qwen2(tmp_path / "m", hidden_size=32, heads=2)  # head size 16
    with pytest.raises(ConfigError, match=r"head size 16 .*32\.\.512"):
        check_model(model)
    with pytest.raises(ConfigError, match=r"config\.json"):
        check_model(tmp_path)


def test_a_failed_start_names_the_log_and_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_qwen2(tmp_path / "m", hidden_size=64, heads=2)
    monkeypatch.setenv(PYTHON_ENV, str(tmp_path / "nowhere" / "python"))
    proc = VLLMProcess(model, VLLMConfig(), tmp_path / "engine" / "vllm.log")
    with pytest.raises(EngineStartError, match="make setup"):
        asyncio.run(proc.start())
    monkeypatch.setenv(PYTHON_ENV, "/bin/false")  # starts, exits 1 at once: a real subprocess that fails
    with pytest.raises(EngineStartError, match=r"exited with code 1; log: .*vllm\.log"):
        asyncio.run(proc.start())
    assert not proc.running


def test_engine_vllm_needs_a_hugging_face_checkpoint() -> None:
    with pytest.raises(ConfigError, match="--checkpoint HF_DIR"):
        TrainConfig(engine="vllm")
    with pytest.raises(ConfigError, match="engine must be"):
        TrainConfig(engine="sglang", checkpoint="x")  # type: ignore[arg-type]
    result = CliRunner().invoke(app, ["policy", "serve", "--engine", "vllm"])
    assert result.exit_code == 2 and "--checkpoint HF_DIR" in result.output


def test_checkpoint_names_are_the_hugging_face_files(tmp_path: Path) -> None:
    """The learner's state dict (HFCausalLM wraps the model as ``.model``) becomes the names vLLM loads:
    those of save_pretrained's file, plus the tied lm_head as a copy of the embedding."""
    from safetensors import safe_open

    model = tiny_qwen2(tmp_path / "m", hidden_size=64, heads=2)
    policy = load_policy(path=model, device="cpu")
    state = checkpoint_state(policy.module.state_dict())
    with safe_open(str(model / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    assert set(state) == names | {"lm_head.weight"}
    assert torch.equal(state["lm_head.weight"], state["model.embed_tokens.weight"])
    assert all(not n.startswith("model.model.") for n in state)


# ------------------------------------------------------------------------------ one real engine


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("vllm-models")
    base = tiny_qwen2(root / "base", hidden_size=64, heads=2)
    return variant(base, root / "w0", seed=1), variant(base, root / "w1", seed=2)


@pytest.fixture(scope="module")
def served(models: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """``envfarm policy serve --engine vllm`` on W1 (a subprocess, the CLI path), until the module ends."""
    port = free_port()
    engine_dir = tmp_path_factory.mktemp("engine")
    cmd = [sys.executable, "-m", "envfarm.cli", "policy", "serve", "--engine", "vllm", "--checkpoint",
           str(models[1]), "--port", str(port), "--engine-dir", str(engine_dir), "--threads", "1"]
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        asyncio.run(_wait_healthy(url, proc, engine_dir))
        yield {"url": url, "proc": proc, "engine_dir": engine_dir}
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)


async def _wait_healthy(url: str, proc: subprocess.Popen[bytes], engine_dir: Path) -> None:
    deadline = time.monotonic() + 900
    async with aiohttp.ClientSession() as s:
        while True:
            if proc.poll() is not None:
                out = proc.stdout.read().decode() if proc.stdout else ""
                path = engine_dir / "vllm.log"
                log = path.read_text()[-3000:] if path.exists() else ""
                pytest.fail(f"envfarm policy serve --engine vllm exited {proc.returncode}:\n{out[-3000:]}\n"
                            f"{log}")
            try:
                async with s.get(url + "/health") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            assert time.monotonic() < deadline, "vLLM did not come up within 900 s"
            await asyncio.sleep(1)


async def _greedy(url: str, prompt: str, max_tokens: int = 16, **extra: Any) -> tuple[str, dict[str, Any]]:
    body = {"model": "w1", "messages": [{"role": "user", "content": prompt}], "temperature": 0,
            "max_tokens": max_tokens, "logprobs": True, **extra}
    async with aiohttp.ClientSession() as s, s.post(url + "/v1/chat/completions", json=body) as r:
        assert r.status == 200, await r.text()
        return r.headers["X-Weight-Version"], await r.json()


def _ids(reply: dict[str, Any]) -> list[int]:
    return list(reply["choices"][0]["token_ids"])


def _logprobs(reply: dict[str, Any]) -> torch.Tensor:
    return torch.tensor([c["logprob"] for c in reply["choices"][0]["logprobs"]["content"]])


def _forward_logprobs(model: transformers.PreTrainedModel, reply: dict[str, Any]) -> torch.Tensor:
    """The completion's logprobs under ``model`` (transformers, float32): what the reply should say."""
    prompt, ids = reply["prompt_token_ids"], _ids(reply)
    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids)[:, None])[:, 0]


@pytest.mark.slow
@pytest.mark.usefixtures("vllm_engine")
def test_reply_has_version_token_ids_and_the_models_logprobs(served: dict[str, Any],
                                                              models: tuple[Path, Path]) -> None:
    url = served["url"]
    version, reply = asyncio.run(_greedy(url, PROMPTS[0], seed=7))  # a seed is dropped, not fatal
    assert version == "0"
    ids, prompt_ids = _ids(reply), reply["prompt_token_ids"]
    tok = transformers.AutoTokenizer.from_pretrained(str(models[1]))
    assert prompt_ids == tok.apply_chat_template([{"role": "user", "content": PROMPTS[0]}], tokenize=True,
                                                 add_generation_prompt=True, return_dict=True)["input_ids"]
    model = transformers.AutoModelForCausalLM.from_pretrained(str(models[1]), dtype=torch.float32)
    got, expected = _logprobs(reply), _forward_logprobs(model, reply)
    assert ids and torch.allclose(got, expected, atol=1e-4), (got - expected).abs().max()

    async def farm_reply() -> Any:  # what the farm's policy keeps of it
        async with OpenAIPolicy(url, temperature=0, max_tokens=8) as policy:
            view = EpisodeView(env=None, seed=0, messages=[{"role": "user", "content": PROMPTS[1]}],  # type: ignore[arg-type]
                               tools=[])
            return await policy.act(view)

    kept = asyncio.run(farm_reply())
    assert kept.weight_version == 0 and kept.token_ids and kept.prompt_token_ids
    assert kept.logprobs is not None and len(kept.logprobs) == len(kept.token_ids)

    async def streamed() -> tuple[str, str]:  # server-sent events pass through the front, version named
        body = {"model": "w1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                "stream": True}
        async with aiohttp.ClientSession() as s, s.post(url + "/v1/chat/completions", json=body) as r:
            return r.headers["X-Weight-Version"], await r.text()

    version, text = asyncio.run(streamed())
    assert version == "0" and "chat.completion.chunk" in text and text.rstrip().endswith("data: [DONE]")


@pytest.mark.slow
@pytest.mark.usefixtures("vllm_engine")
def test_reload_in_place_answers_like_a_fresh_server(served: dict[str, Any],
                                                     models: tuple[Path, Path]) -> None:
    url = served["url"]
    w0, w1 = (load_policy(path=m, device="cpu").module for m in models)

    async def run() -> dict[str, Any]:
        fresh = [(await _greedy(url, p))[1] for p in PROMPTS]  # the server started on W1
        first = await publish(url, w0, 1)
        old = [await _greedy(url, p) for p in PROMPTS]  # W0, and W0's prefixes in vLLM's cache
        second = await publish(url, w1, 2)
        new = [await _greedy(url, p) for p in PROMPTS]
        return {"fresh": fresh, "old": old, "new": new, "publish": [first, second]}

    r = asyncio.run(run())
    assert [v for v, _ in r["old"]] == ["1"] * len(PROMPTS)
    assert [v for v, _ in r["new"]] == ["2"] * len(PROMPTS)
    assert [_ids(x) for _, x in r["old"]] != [_ids(x) for x in r["fresh"]]  # W0 answers otherwise
    model0 = transformers.AutoModelForCausalLM.from_pretrained(str(models[0]), dtype=torch.float32)
    for _, x in r["old"]:  # every weight reloaded, the tied output projection too (see checkpoint_state)
        assert torch.allclose(_logprobs(x), _forward_logprobs(model0, x), atol=1e-4)
    for (_, x), y in zip(r["new"], r["fresh"], strict=True):  # back on W1: a fresh server's answers
        assert _ids(x) == _ids(y) and torch.allclose(_logprobs(x), _logprobs(y), atol=1e-5)
    assert [p.version for p in r["publish"]] == [1, 2]
    seconds = [round(p.seconds, 3) for p in r["publish"]]
    print(f"publish seconds (encode + HTTP + write + drain + reload): {seconds}")


@pytest.mark.slow
@pytest.mark.usefixtures("vllm_engine")
def test_requests_in_flight_during_a_reload_keep_one_version(served: dict[str, Any],
                                                             models: tuple[Path, Path]) -> None:
    url = served["url"]
    w0, w1 = (load_policy(path=m, device="cpu").module for m in models)
    prompts = PROMPTS * 4

    async def run() -> tuple[dict[str, list[list[int]]], list[tuple[str, dict[str, Any]]]]:
        await publish(url, w1, 3)
        refs = {"3": [_ids((await _greedy(url, p, 24))[1]) for p in PROMPTS]}
        await publish(url, w0, 4)
        refs["4"] = [_ids((await _greedy(url, p, 24))[1]) for p in PROMPTS]
        await publish(url, w1, 3)
        early = [asyncio.create_task(_greedy(url, p, 24)) for p in prompts]
        await asyncio.sleep(0.3)
        reload = asyncio.create_task(publish(url, w0, 4))  # while they run: it waits for them
        await asyncio.sleep(0.1)
        late = [asyncio.create_task(_greedy(url, p, 24)) for p in prompts]  # held until it is done
        await reload
        return refs, list(await asyncio.gather(*early, *late))

    refs, replies = asyncio.run(run())
    for i, (version, reply) in enumerate(replies):
        assert version in refs, version
        assert _ids(reply) == refs[version][i % len(PROMPTS)], (i, version)  # all tokens from that version


@pytest.mark.slow
@pytest.mark.usefixtures("vllm_engine")
def test_after_an_optimizer_step_vllm_samples_with_the_learners_weights(served: dict[str, Any],
                                                                        models: tuple[Path, Path]) -> None:
    """The RL loop's round trip: sample, one learner step on it, publish, sample again; both times vLLM's
    logprobs are the learner's own recompute (logprob_check.py), so the reload took every weight."""
    url = served["url"]
    policy = load_policy(path=models[1], device="cpu")
    learner = Learner(policy.module, LearnerConfig(lr=1e-3), policy.tokenizer.pad_id, policy.device)

    async def sample(version: int) -> list[TokenSample]:
        await publish(url, learner.module, version)
        replies = [(await _greedy(url, p, 16, temperature=1.0))[1] for p in PROMPTS]
        return [TokenSample.turn(tuple(r["prompt_token_ids"]), tuple(_ids(r)), tuple(_logprobs(r).tolist()),
                                 1.0 if i % 2 else -1.0, version) for i, r in enumerate(replies)]

    first = asyncio.run(sample(10))
    before = logprob_mismatch(learner.module, first, learner.pad_id, "cpu")
    learner.update(first, "rl")
    after = logprob_mismatch(learner.module, asyncio.run(sample(11)), learner.pad_id, "cpu")
    moved = logprob_mismatch(learner.module, first, learner.pad_id, "cpu")
    assert before is not None and after is not None and moved is not None
    assert before.max < 1e-4 and after.max < 1e-4, (before, after)
    assert moved.max > 1e-3  # the step changed the policy: a stale engine would have shown it


@pytest.mark.slow
@pytest.mark.usefixtures("vllm_engine")
def test_a_dead_engine_is_named_and_sigterm_leaves_no_process(served: dict[str, Any]) -> None:
    """vLLM killed under the front: requests get a 503 that names the engine's log (the farm retries, then
    stops with it); SIGTERM to ``envfarm policy serve`` then ends it and every process vLLM had started."""
    proc: subprocess.Popen[bytes] = served["proc"]
    family = descendants(proc.pid)
    assert len(family) >= 2  # vLLM's api_server and its engine core, at least
    api = [p for p in family if b"api_server" in Path(f"/proc/{p}/cmdline").read_bytes()]
    os.kill(api[0], signal.SIGKILL)

    async def ask() -> tuple[int, str]:
        body = {"model": "w1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        url = served["url"] + "/v1/chat/completions"
        for _ in range(20):  # until the serving process has reaped its dead child
            async with aiohttp.ClientSession() as s, s.post(url, json=body) as r:
                status, text = r.status, await r.text()
            if "died" in text:
                break
            await asyncio.sleep(0.5)
        return status, text

    status, text = asyncio.run(ask())
    assert status == 503 and "died" in text and "vllm.log" in text, text
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{pid}").exists() for pid in family) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert [pid for pid in family if Path(f"/proc/{pid}").exists()] == []
