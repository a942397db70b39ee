"""``envfarm train`` end to end on bwrap through real HTTP (server, farm, learner in one process), tiny
settings; then the same run killed with SIGKILL mid-RL and resumed with ``--resume``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from envfarm.trainer.loop import Training
from envfarm.trainer.train_config import TrainConfig

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]

TINY = ["--sft-steps", "3", "--sft-demos", "12", "--group-size", "2", "--prompts-per-update", "1",
        "--ppo-epochs", "2", "--eval-episodes", "20", "--sft-more-demos", "12", "--concurrency", "8",
        "--max-tokens", "8", "--threads", "1", "--quiet"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _train(*args: str) -> list[str]:
    return [sys.executable, "-m", "envfarm.cli", "train", *args]


def _records(out: Path) -> list[dict]:
    path = out / "metrics.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _rl_updates(out: Path) -> list[int]:
    return [r["step"] for r in _records(out) if r["kind"] == "update" and r["phase"] == "rl"]


def test_train_kill_and_resume(tmp_path: Path) -> None:
    out = tmp_path / "run"
    # two learner processes (gloo) for the first session, one after the resume
    proc = subprocess.Popen(_train("--out", str(out), "--rl-updates", "3", "--nproc", "2", *TINY), env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not _rl_updates(out) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _rl_updates(out), f"no RL update within 240s:\n{proc.stdout.read().decode()[-3000:] if proc.poll() is not None else ''}"  # noqa: E501
        os.killpg(proc.pid, signal.SIGKILL)  # the learner dies with its farm and server, mid-RL
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert not (out / "summary.json").exists()

    done = subprocess.run(_train("--resume", str(out), "--quiet"), env=ENV, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    for arm in ("sft", "sft_more", "rl"):
        for mode in ("greedy", "sampled"):
            score = summary["arms"][arm][mode]
            assert score["episodes"] == 20 and score["ci95"][0] <= score["mean"] <= score["ci95"][1]
    for name in ("rl_minus_sft_more", "rl_minus_sft"):
        assert set(summary[name]) == {"greedy", "sampled"}
        assert all(set(d) == {"diff", "ci95"} for d in summary[name].values())
    assert summary["seeds"]["eval"] == [3_000_000, 3_000_020] and summary["teacher"]["name"] == "oracle"
    compute = summary["compute"]
    assert compute["rl"]["updates"] == 3 and summary["final_version"] == 3
    sft_state = json.loads((out / "checkpoints" / "sft" / "state.json").read_text())["loop"]
    assert sft_state["sft_seconds"] > 0  # SFT's time is checkpointed with its weights
    assert summary["phase_s"]["sft"] == pytest.approx(sft_state["sft_seconds"], abs=0.01)
    assert compute["sft_more"]["seconds"] >= compute["rl"]["seconds"]  # equal compute, at least
    assert compute["sft_more"]["tokens"] >= compute["rl"]["sampled_tokens"] > 0
    assert _rl_updates(out) == [1, 2, 3]  # resumed from the last checkpoint: each update logged once
    records = _records(out)
    assert {r["kind"] for r in records} == {"update", "publish", "eval"}
    assert all("time" in r for r in records)
    publishes = [r for r in records if r["kind"] == "publish"]
    assert [p["version"] for p in publishes] == [1, 2, 3] and all(p["bytes"] > 0 for p in publishes)
    evals = [f"{arm}-{mode}" for arm in ("sft", "rl", "sft_more") for mode in ("greedy", "sampled")]
    assert [r["phase"] for r in records if r["kind"] == "eval"] == evals
    more = [r["step"] for r in records if r["kind"] == "update" and r["phase"] == "sft_more"]
    assert more == list(range(1, compute["sft_more"]["steps"] + 1))
    updates = [r for r in records if r["kind"] == "update"]
    lrs = {p: [r["lr"] for r in updates if r["phase"] == p] for p in ("sft", "sft_more")}
    # sft_more goes on with SFT's schedule: step 4 of the 20-step warm-up, not step 1 again
    assert lrs["sft_more"][0] == pytest.approx(lrs["sft"][-1] * 4 / 3)
    assert load_file(out / "checkpoints" / "sft" / "optimizer.safetensors"), "SFT's AdamW moments are kept"
    assert (out / "reward_curve.png").stat().st_size > 1000
    assert any((out / "tensorboard").iterdir())
    latest = (out / "checkpoints" / "latest").read_text().strip()
    assert latest == "sft_more"
    for name in ("model.safetensors", "optimizer.safetensors", "state.json", "policy/spec.json"):
        assert (out / "checkpoints" / latest / name).exists()
    assert (out / "checkpoints" / "rl-000003" / "model.safetensors").exists()
    for run in ("demos", "val-demos", "more-demos", "rl", *(f"eval-{e}" for e in evals)):
        assert (out / "runs" / run / "run.json").exists()
    demo = json.loads((out / "runs" / "demos" / "spool.jsonl").read_text().splitlines()[0])
    assert "Tools:" not in demo["messages"][0]["content"]  # tool_help off: the tools come through the API
    assert json.loads((out / "config.json").read_text())["env_kwargs"] == {"tool_help": False}
    ids = [json.loads(x)["episode_id"] for x in (out / "ingest.jsonl").read_text().splitlines()]
    assert len(ids) == len(set(ids))  # the farm re-sent after the kill; the inbox stored each episode once

    # a run killed between SFT and its first RL checkpoint resumes from `sft`: RL gets fresh moments
    (out / "checkpoints" / "latest").write_text("sft")
    loop = Training(TrainConfig.load(out), out)
    loop._setup(resume=True)
    try:
        assert loop.loop_state.phase == "rl" and loop.learner is not None
        assert not loop.learner.optimizer.state
    finally:
        loop._close_ranks()
        assert loop.metrics is not None
        loop.metrics.close()


def test_bad_options_exit_2(tmp_path: Path) -> None:
    bad = subprocess.run(_train("--out", str(tmp_path / "x"), "--lr", "-1", "--quiet"), env=ENV,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "error" in bad.stderr
    missing = subprocess.run(_train("--resume", str(tmp_path / "nothing")), env=ENV, capture_output=True,
                             text=True, timeout=60)
    assert missing.returncode == 2 and "not a training folder" in missing.stderr
    not_object = subprocess.run(_train("--out", str(tmp_path / "y"), "--env-kwargs", "[1]"), env=ENV,
                                capture_output=True, text=True, timeout=60)
    assert not_object.returncode == 2 and "--env-kwargs must be a JSON object" in not_object.stderr


def _weights_equal(module: torch.nn.Module, state: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(v, state[k]) for k, v in module.state_dict().items())


def test_the_kl_reference_is_the_sft_policy_after_sft_and_after_a_resume(tmp_path: Path) -> None:
    config = TrainConfig(kl_coef=0.1, device="cpu")
    first = Training(config, tmp_path)
    first._setup(resume=False)
    learner = first.learner
    assert learner is not None and learner.reference is not None
    with torch.no_grad():
        for p in learner.module.parameters():
            p.add_(0.01)  # what SFT would have learned
    first.loop_state = replace(first.loop_state, phase="rl", sft_step=3)
    first._save("sft")
    sft = {k: v.clone() for k, v in learner.module.state_dict().items()}
    assert not _weights_equal(learner.reference, sft)  # still the random init until SFT ends
    first._begin_rl()
    assert _weights_equal(learner.reference, sft)
    with torch.no_grad():
        for p in learner.module.parameters():
            p.add_(0.01)  # an RL update
    first._save("rl-000001", replace(first.rl_state, updates=1, version=1))
    first._close_ranks()

    resumed = Training(config, tmp_path)
    resumed._setup(resume=True)
    assert resumed.learner is not None and resumed.learner.reference is not None
    assert not _weights_equal(resumed.learner.module, sft)
    assert _weights_equal(resumed.learner.reference, sft)
    resumed._close_ranks()
