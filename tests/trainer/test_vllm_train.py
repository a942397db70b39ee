"""``envfarm train --engine vllm``: a tiny Hugging Face model (a random Qwen2 with a BPE tokenizer trained
here) goes SFT -> eval -> RL -> eval with vLLM as the rollout engine; the env (ToolCalc in bwrap sandboxes),
the farm, the learner and the engine are all real, with HTTP between them.

After SFT the policy is saved for vLLM and the engine starts on it; every RL update publishes the weights,
which vLLM reloads in place (prefix cache reset) as the next version; the farm tags each turn with the
version that produced it; the learner checks vLLM's logprobs of on-policy turns against its own recompute
(float32 on both sides: they agree to ~1e-5). When the run ends, no engine process is left."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hf_support import tiny_qwen2

from envfarm.rollout.trajectory import Trajectory

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
UPDATES = 3


def test_train_with_the_vllm_engine(tmp_path: Path) -> None:
    model = tiny_qwen2(tmp_path / "qwen2-tiny", hidden_size=64, heads=2)  # head size 32 (vLLM's CPU minimum)
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "envfarm.cli", "train", "--engine", "vllm", "--checkpoint", str(model),
         "--out", str(out), "--sft-steps", "4", "--sft-demos", "12", "--sft-held-out", "4",
         "--sft-check-every", "2", "--group-size", "2", "--prompts-per-update", "2", "--rl-updates",
         str(UPDATES), "--no-sft-more", "--eval-episodes", "4", "--concurrency", "8", "--max-tokens", "24",
         "--threads", "1", "--quiet"], env=ENV, capture_output=True, text=True, timeout=1500)
    log = out / "engine" / "vllm.log"
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + (
        log.read_text()[-3000:] if log.exists() else "")
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["arms"]) == {"sft", "rl"} and summary["final_version"] == UPDATES

    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    published = [r["version"] for r in records if r["kind"] == "publish"]
    assert published == list(range(1, UPDATES + 1))  # each reloaded in place by vLLM as that version
    checks = [r["logprob_mismatch"] for r in records if r["kind"] == "update" and r.get("logprob_mismatch")]
    assert checks and all(c["tokens"] > 0 and c["max"] < 1e-3 for c in checks), checks

    turns = [turn for line in (out / "ingest.jsonl").read_text().splitlines()
             for turn in Trajectory.from_json(line).turns]
    assert turns and all(t.token_ids and t.prompt_token_ids and t.logprobs for t in turns)
    assert all(len(t.logprobs or ()) == len(t.token_ids or ()) for t in turns)
    assert {t.weight_version for t in turns} <= set(range(UPDATES + 1))  # vLLM's replies, tagged by envfarm

    assert len(list((out / "engine" / "weights").iterdir())) == 1  # older published versions deleted
    pids = {int(p) for p in re.findall(r"pid=(\d+)\)", log.read_text())}
    assert pids and not [p for p in pids if Path(f"/proc/{p}").exists()]  # api_server, engine core, worker
