"""``envfarm train --engine vllm``: a tiny Hugging Face model (a random Qwen2 with a BPE tokenizer trained
here) goes SFT -> eval -> RL (4 updates) -> eval with vLLM as the rollout engine; the env (a "say the word"
plugin env, pip-installed like any third-party package, in bwrap sandboxes), the farm, the learner and the
engine are all real, with HTTP between them.

The env asks for one of four words; SFT on the oracle's demonstrations teaches the tool-call format within
tens of steps, not reliably which word to say, so at temperature 1 the model says one of the four words,
sometimes the right one: GRPO groups with mixed rewards, hence real optimizer steps. After SFT the policy is
saved for vLLM and the engine starts on it; every RL update publishes the weights, which vLLM reloads in place
(prefix cache reset) as the next version; the farm tags each turn with the version that produced it; the
learner checks vLLM's logprobs of on-policy turns against its own recompute (float32 on both sides: they agree
to ~1e-6). Checked here after the run: every update took an optimizer step; the weights vLLM loaded last are
the last update's, not SFT's; vLLM's logprobs of turns sampled after the steps are the learner's recompute on
their version's weights and far from the SFT weights'. When the run ends, no engine process is left."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from plugin_support import install_plugins, plugin_package
from safetensors.torch import load_file

from envfarm.rollout.trajectory import Trajectory, Turn
from envfarm.testing.tiny_hf import tiny_qwen2
from envfarm.trainer.logprob_check import logprob_mismatch
from envfarm.trainer.policy import load_policy
from envfarm.trainer.samples import TokenSample
from envfarm.trainer.vllm_front import checkpoint_state

pytestmark = [pytest.mark.bwrap, pytest.mark.slow, pytest.mark.usefixtures("vllm_engine")]  # conftest.py
UPDATES = 4
WORDS = ("apple", "river", "quartz", "violet")

SAY_WORD = f'''
"""Say the word asked for with the say tool: reward 1 for the right word; a reply with no valid call gets
the parse error and one more turn."""
import json
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from envfarm.envs import AgentEnv, Outcome, register, tool

WORDS = {WORDS!r}


@dataclass(frozen=True)
class Task:
    task_id: str
    word: str


class SayArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(description="The word.")


class SayEnv(AgentEnv[Task]):
    default_max_steps = 2

    def generate(self, rng):
        word = WORDS[int(rng.integers(len(WORDS)))]
        return Task(f"say-{{word}}", word)

    def prompt(self, task):
        return f"Say {{task.word}}."

    @tool("Say a word. Ends the episode; reward 1 if it is the word asked for.")
    async def say(self, args: SayArgs) -> Outcome:
        ok = args.text.strip() == self.task.word
        return Outcome(f"You said {{args.text!r}}.", reward=float(ok), done=True)

    def oracle(self):
        return [json.dumps({{"name": "say", "arguments": {{"text": self.task.word}}}})]


def register_envs():
    register("say/Say-v0", "say_word:SayEnv", description="Say the word asked for")
'''

def _plugin_env(tmp: Path) -> dict[str, str]:
    """pip-install the say-word plugin into a private folder; the environment of the train subprocess."""
    say = plugin_package(tmp, "say-word", "say = say_word:register_envs", {"say_word.py": SAY_WORD})
    return install_plugins(tmp, say, OMP_NUM_THREADS="1")


def _check_served_weights(out: Path) -> None:
    """The weights vLLM reloaded last are the learner's after the last update, not the SFT weights."""
    folders = list((out / "engine" / "weights").iterdir())
    assert len(folders) == 1 and folders[0].name == f"v{UPDATES}"  # older published versions deleted
    served = load_file(folders[0] / "model.safetensors")
    final = checkpoint_state(load_file(out / "checkpoints" / f"rl-{UPDATES:06d}" / "model.safetensors"))
    sft = checkpoint_state(load_file(out / "checkpoints" / "sft" / "model.safetensors"))
    assert set(served) == set(final) and all(torch.equal(served[name], t) for name, t in final.items())
    moved = max((served[name] - t).abs().max().item() for name, t in sft.items())
    assert moved > 1e-4, moved


def _max_mismatch(out: Path, checkpoint: str, turns: list[Turn]) -> float | None:
    """Max |recompute - vLLM's logprob| over the turns' tokens, recomputed in float32 on the policy of
    ``checkpoints/<checkpoint>``; None without turns."""
    samples = [TokenSample.turn(t.prompt_token_ids, t.token_ids, t.logprobs)
               for t in turns if t.prompt_token_ids and t.token_ids]
    if not samples:
        return None
    policy = load_policy(path=out / "checkpoints" / checkpoint / "policy", device="cpu")
    found = logprob_mismatch(policy.module, samples, policy.tokenizer.pad_id, "cpu")
    return None if found is None else found.max


def test_train_with_the_vllm_engine(tmp_path: Path) -> None:
    env = _plugin_env(tmp_path)
    corpus = [f"Say {w}." for w in WORDS] + [
        f'<tool_call>\n{{"name": "say", "arguments": {{"text": "{w}"}}}}\n</tool_call>' for w in WORDS]
    model = tiny_qwen2(tmp_path / "qwen2-tiny", hidden_size=64, heads=2,  # head size 32 (vLLM's CPU minimum)
                       corpus=corpus * 4)
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "envfarm.cli", "train", "--engine", "vllm", "--checkpoint", str(model),
         "--env", "say/Say-v0", "--out", str(out), "--sft-steps", "60", "--sft-lr", "5e-3", "--sft-target",
         "0", "--sft-demos", "32", "--group-size", "8", "--prompts-per-update", "2", "--group-window", "8",
         "--lr", "1e-3", "--rl-updates", str(UPDATES), "--no-sft-more", "--eval-episodes", "8",
         "--concurrency", "16", "--max-tokens", "40", "--threads", "1", "--quiet",
         "--temperature", "1.0",  # every word likely enough to be said: groups with mixed rewards
         # no turn too old to learn from: on a loaded machine groups arrive versions late, and dropping their
         # turns as stale skipped the update (seen here); the steps through the engine are under test
         "--max-staleness", str(UPDATES)],
        env=env, capture_output=True, text=True, timeout=1500)
    log = out / "engine" / "vllm.log"
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + (
        log.read_text()[-3000:] if log.exists() else "")
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["arms"]) == {"sft", "rl"} and summary["final_version"] == UPDATES

    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    published = [r["version"] for r in records if r["kind"] == "publish"]
    assert published == list(range(1, UPDATES + 1))  # each reloaded in place by vLLM as that version
    updates = [r for r in records if r["kind"] == "update" and r["phase"] == "rl"]
    assert len(updates) == UPDATES
    # every update found groups with mixed rewards and took an optimizer step on them
    assert all(not r["skipped"] and r["samples"] > 0 and r["grad_norm"] > 0 and 0 < r["reward_mean"] < 1
               for r in updates), updates
    # the learner's check before each update: vLLM's logprobs of the turns sampled on its current weights
    checks = {r["version"] - 1: r["logprob_mismatch"] for r in updates if r.get("logprob_mismatch")}
    assert 0 in checks and all(c["tokens"] > 0 and c["max"] < 1e-3 for c in checks.values()), checks

    turns = [turn for line in (out / "ingest.jsonl").read_text().splitlines()
             for turn in Trajectory.from_json(line).turns]
    assert turns and all(t.token_ids and t.prompt_token_ids and t.logprobs for t in turns)
    assert all(len(t.logprobs or ()) == len(t.token_ids or ()) for t in turns)
    assert {t.weight_version for t in turns} <= set(range(UPDATES + 1))  # vLLM's replies, tagged by envfarm

    _check_served_weights(out)
    # vLLM served the weights the steps moved: its logprobs of the turns sampled on versions >= 1 (there are
    # some: every update stepped on turns at most one version old) are far from the SFT weights' recompute and
    # equal the learner's on their version, by the learner's check and, where the checkpoint is kept, here;
    # which versions these cover depends on the asynchronous farm's timing, so their union is asserted
    stepped = [t for t in turns if isinstance(t.weight_version, int) and t.weight_version >= 1]
    off = _max_mismatch(out, "sft", stepped)
    assert off is not None and off > 1e-2, off
    same = {f"learner v{v}": c["max"] for v, c in checks.items() if v >= 1}
    for v in (UPDATES - 1, UPDATES):  # the rl-* checkpoints kept
        found = _max_mismatch(out, f"rl-{v:06d}", [t for t in turns if t.weight_version == v])
        if found is not None:
            same[f"test v{v}"] = found
    assert same and all(x < 1e-3 for x in same.values()), same

    pids = {int(p) for p in re.findall(r"pid=(\d+)\)", log.read_text())}
    deadline = time.monotonic() + 15  # a worker killed at the end may still be exiting: gone within 15 s
    while [p for p in pids if Path(f"/proc/{p}").exists()] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pids and not [p for p in pids if Path(f"/proc/{p}").exists()]  # api_server, engine core, worker
