"""A Hugging Face model through the whole loop on CPU, with the same commands as the built-in model: a tiny
Qwen2 (random init, a byte-level BPE tokenizer trained here on ToolCalc text, a ChatML template with tool
calls; nothing downloaded) goes SFT -> eval -> RL -> eval (``envfarm train --checkpoint``), then
``envfarm policy serve --checkpoint`` serves the trained policy. The server's behaviour log-probs match the
learner's recompute (PPO ratio 1 on the weights that sampled), and a few learner updates move the weights."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from envfarm.rollout.trajectory import Trajectory
from envfarm.testing.tiny_hf import tiny_qwen2
from envfarm.trainer.learner import Learner, LearnerConfig
from envfarm.trainer.policy import load_policy
from envfarm.trainer.samples import TokenSample

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_hf_model_sft_eval_rl_eval_serve(tmp_path: Path) -> None:
    model = tiny_qwen2(tmp_path / "qwen2-tiny")
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "envfarm.cli", "train", "--checkpoint", str(model), "--out", str(out),
         "--sft-steps", "4", "--sft-demos", "12", "--sft-held-out", "4", "--sft-check-every", "2",
         "--group-size", "2", "--prompts-per-update", "2", "--rl-updates", "2", "--sync",
         "--eval-episodes", "8", "--sft-more-demos", "8", "--concurrency", "8", "--max-tokens", "24",
         "--threads", "1", "--quiet"], env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["arms"]) == {"sft", "sft_more", "rl"} and summary["final_version"] == 2
    assert all(s["episodes"] == 8 for arm in summary["arms"].values() for s in arm.values())
    spec = json.loads((out / "checkpoints" / "sft_more" / "policy" / "spec.json").read_text())
    assert spec["kind"] == "hf"

    # the behaviour log-probs the server returned for version 0 are the learner's recompute on the SFT
    # weights: PPO ratio 1; a few RL updates on them move the weights
    policy = load_policy(path=out / "checkpoints" / "sft" / "policy", device="cpu")
    trajectories = [Trajectory.from_json(x) for x in (out / "ingest.jsonl").read_text().splitlines()]
    samples = [TokenSample.turn(t.prompt_token_ids, t.token_ids, t.logprobs, 1.0 if i % 2 else -1.0, 0)
               for i, t in enumerate(turn for traj in trajectories for turn in traj.turns
                                     if turn.weight_version == 0 and turn.token_ids)]
    assert samples
    learner = Learner(policy.module, LearnerConfig(lr=1e-2), policy.tokenizer.pad_id, policy.device)
    before = [p.detach().clone() for p in policy.module.parameters()]
    first = learner.update(samples, "rl")
    assert first.ratio_mean == pytest.approx(1.0, abs=1e-3)
    for _ in range(2):
        learner.update(samples, "rl")
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.module.parameters(), strict=True))

    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "envfarm.cli", "policy", "serve", "--checkpoint",
                               str(out / "checkpoints" / "sft_more" / "policy"), "--port", str(port)],
                              env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        import openai

        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
        deadline = time.monotonic() + 120
        while True:
            try:
                models = client.models.list()
                break
            except openai.APIConnectionError:
                assert server.poll() is None and time.monotonic() < deadline, server.stdout.read().decode()[-2000:]  # type: ignore[union-attr]  # noqa: E501
                time.sleep(0.5)
        reply = client.chat.completions.create(model=models.data[0].id, max_tokens=8, logprobs=True,
                                               messages=[{"role": "user", "content": "What is 3*4?"}])
        assert len(reply.choices[0].logprobs.content) >= 1  # type: ignore[union-attr]
    finally:
        server.terminate()
        server.wait(timeout=30)
