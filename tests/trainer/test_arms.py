"""The statistics and bookkeeping of the three arms: bootstrap intervals against hand-computed cases, the
summary's shape, the demo split, greedy match against real greedy decoding, seed ranges, the repeats spread,
loop states of older checkpoints."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from envfarm.envs.registration import registered
from envfarm.errors import ConfigError
from envfarm.rollout.trajectory import Trajectory, Turn
from envfarm.trainer.evaluation import EvalResult, mean_bootstrap, paired_bootstrap
from envfarm.trainer.generate import generate
from envfarm.trainer.policy import load_policy
from envfarm.trainer.repeats import RepeatsResult
from envfarm.trainer.samples import TokenSample
from envfarm.trainer.sft import completed_demos, greedy_match
from envfarm.trainer.state import LoopState
from envfarm.trainer.summary import Compute, TrainResult
from envfarm.trainer.train_config import CONFIG_FILE, SeedRange, TrainConfig


def test_paired_bootstrap_hand_computed() -> None:
    # differences 0, 0, 1 over seeds 1-3 (seed 4 scored by one side only: left out). A resample of 3 seeds
    # has mean k/3 with k ~ Binomial(3, 1/3): P(mean 0) = 8/27 and P(mean 1) = 1/27, both above 2.5%, so
    # the 95% percentile interval is exactly [0, 1]; the difference is 1/3.
    diff, low, high, n = paired_bootstrap({1: 0.0, 2: 1.0, 3: 0.0}, {1: 0.0, 2: 1.0, 3: 1.0, 4: 1.0})
    assert (n, low, high) == (3, 0.0, 1.0) and diff == pytest.approx(1 / 3)
    # no seed in common: nothing to compare
    assert paired_bootstrap({1: 1.0}, {2: 0.0}) == (0.0, 0.0, 0.0, 0)
    # a constant difference has a zero-width interval
    assert paired_bootstrap({s: 0.0 for s in range(50)}, {s: 1.0 for s in range(50)})[:3] == (1.0, 1.0, 1.0)


def test_mean_bootstrap_matches_the_normal_interval() -> None:
    rewards = {s: float(s % 2) for s in range(400)}  # p = 0.5, n = 400: 1.96 * sqrt(p(1-p)/n) = 0.049
    mean, low, high = mean_bootstrap(rewards)
    assert mean == 0.5 and low == pytest.approx(0.451, abs=0.01) and high == pytest.approx(0.549, abs=0.01)
    assert mean_bootstrap({}) == (0.0, 0.0, 0.0)


def _result(per_seed: dict[int, float]) -> EvalResult:
    return EvalResult(sum(per_seed.values()) / len(per_seed), len(per_seed), per_seed, 0, "", 1.0)


def test_summary_json_has_the_issue_shape() -> None:
    seeds = range(3_000_000, 3_000_100)
    evals = {("sft", "greedy"): _result({s: 0.0 for s in seeds}),
             ("sft", "sampled"): _result({s: float(s % 4 == 0) for s in seeds}),
             ("sft_more", "greedy"): _result({s: float(s % 10 == 0) for s in seeds}),
             ("sft_more", "sampled"): _result({s: float(s % 5 == 0) for s in seeds}),
             ("rl", "greedy"): _result({s: float(s % 2 == 0) for s in seeds}),
             ("rl", "sampled"): _result({s: float(s % 2 == 0) for s in seeds})}
    config = TrainConfig(teacher="noisy")
    result = TrainResult.build(evals, env_id=config.env_id, teacher={"name": "noisy", "error": 0.6},
                               eval_split="test", eval_episodes=100, eval_temperature=1.0,
                               seeds={"test": (3_000_000, 4_000_000)},
                               compute=Compute(60.0, 1000, 3, 61.0, 5000, 50), phase_s={"rl": 1.0},
                               wall_s=1.0, sft_steps=10, sft_held_out_match=None, final_version=3, dropped={},
                               load_avg_end=(1.0,), device="cpu", torch_threads=1)
    data = json.loads(json.dumps(result.to_json()))
    assert set(data["arms"]) == {"sft", "sft_more", "rl"}
    for modes in data["arms"].values():
        assert set(modes) == {"greedy", "sampled"}
        assert all(set(x) == {"mean", "ci95", "episodes"} and x["episodes"] == 100 for x in modes.values())
    assert data["arms"]["rl"]["greedy"]["mean"] == 0.5 and data["arms"]["sft"]["greedy"]["ci95"] == [0, 0]
    for name, base in (("rl_minus_sft_more", "sft_more"), ("rl_minus_sft", "sft")):
        for mode in ("greedy", "sampled"):
            d = data[name][mode]
            assert set(d) == {"diff", "ci95"}
            arms = data["arms"]
            assert d["diff"] == pytest.approx(arms["rl"][mode]["mean"] - arms[base][mode]["mean"])
            assert d["ci95"][0] <= d["diff"] <= d["ci95"][1]
    assert data["compute"]["rl"] == {"seconds": 60.0, "sampled_tokens": 1000, "updates": 3}
    assert data["eval_infra_errors"]["rl-greedy"] == 0 and data["teacher"] == {"name": "noisy", "error": 0.6}


def _traj(index: int, status: str, reward: float) -> Trajectory:
    turn = Turn(action="{}", observation="", reward=reward, terminated=True, truncated=False)
    return Trajectory(episode_id=f"e{index}", env_id="envfarm/ToolCalc-v0", index=index, seed=index,
                      task_id=str(index), status=status, turns=(turn,))  # type: ignore[arg-type]


def test_demo_split_keeps_the_teachers_mistakes_and_drops_broken_episodes() -> None:
    demos = [_traj(3, "completed", 0.0), _traj(1, "completed", 1.0), _traj(2, "infra_error", 0.0),
             _traj(0, "completed", 1.0)]
    assert [t.index for t in completed_demos(demos)] == [0, 1, 3]  # the wrong one (3) is imitated too
    ranges = TrainConfig(sft_demos=3000).seed_ranges()
    assert ranges.demos == SeedRange(1_000_000, 1_003_000)
    assert not ranges.demos.overlaps(ranges.more_demos) and not ranges.more_demos.overlaps(ranges.rl)


def test_greedy_match_is_what_greedy_decoding_reproduces() -> None:
    torch.manual_seed(0)
    policy = load_policy("tiny-cpu", overrides={"d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64,
                                                "max_context": 128}, device="cpu", seed=0)
    prompts = [[5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16]]
    greedy = [g[0].token_ids for g in generate(policy, prompts, temperature=0.0, max_tokens=6)]
    samples = [TokenSample.turn(tuple(p), tuple(c)) for p, c in zip(prompts, greedy, strict=True)]
    last = greedy[2]
    changed = (*last[:-1], (last[-1] + 1) % policy.tokenizer.vocab_size)  # one token off greedy
    samples.append(TokenSample.turn(tuple(prompts[2]), changed))
    pad = policy.tokenizer.pad_id
    assert greedy_match(policy.module, samples[:3], pad, "cpu") == 1.0
    assert greedy_match(policy.module, samples, pad, "cpu") == 0.75
    assert greedy_match(policy.module, [], pad, "cpu") == 0.0


@pytest.mark.parametrize("env_id", sorted(info.id for info in registered()))
def test_seed_ranges_are_disjoint_for_every_registered_env(env_id: str) -> None:
    for split in ("test", "validation"):
        config = TrainConfig(env_id=env_id, eval_split=split)  # type: ignore[arg-type]
        ranges = config.seed_ranges()
        named = list(vars(ranges).items())
        for i, (a, ra) in enumerate(named):
            for b, rb in named[i + 1 :]:
                assert not ra.overlaps(rb), (env_id, a, b)
        evaluated = getattr(ranges, split)
        assert evaluated.start <= config.eval_seed
        assert config.eval_seed + config.eval_episodes <= evaluated.stop
    assert TrainConfig().eval_seed != TrainConfig(eval_split="validation").eval_seed


def test_overlapping_seed_ranges_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="overlap"):
        TrainConfig(val_seed=3_500_000)
    with pytest.raises(ConfigError, match="overlap"):
        TrainConfig(rl_seed=1_200_000)
    # a config.json written before the split: its evaluation range becomes the test range
    data = {k: v for k, v in json.loads(json.dumps(vars(TrainConfig()))).items() if k != "test_seed"}
    (tmp_path / CONFIG_FILE).write_text(json.dumps({**data, "eval_seed": 7_000_000}))
    assert TrainConfig.load(tmp_path).test_seed == 7_000_000


def test_loop_state_of_an_older_checkpoint() -> None:
    loop, rl = LoopState.from_json({"phase": "rl", "sft_step": 900, "sft_match": 0.5, "later": 1,
                                    "rl": {"version": 4, "updates": 4, "seconds": 30.0, "cursor": None}})
    assert loop == LoopState(phase="rl", sft_step=900, sft_match=0.5) and loop.more_step == 0
    assert rl.version == 4 and rl.sampled_tokens == 0
    assert LoopState.from_json(loop.to_json(rl)) == (loop, rl)
    assert loop.sft_settled == 0  # a checkpoint from before the settle step: the lr never dropped
    settled = replace(loop, sft_settled=1650)
    assert LoopState.from_json(settled.to_json(rl))[0].sft_settled == 1650


def test_sft_lr_warms_up_then_drops_once_settled() -> None:
    c = TrainConfig(teacher="noisy", teacher_error=0.6, sft_lr=1e-3, sft_settle=0.1, sft_settle_lr=0.3)
    assert not TrainConfig().settles(1.0)  # off by default
    assert c.sft_lr_at(0, settled=False) == pytest.approx(1e-3 / 20)  # warm-up: 1/20 of the lr at step 0
    assert c.sft_lr_at(19, settled=False) == c.sft_lr_at(5000, settled=False) == pytest.approx(1e-3)
    assert c.sft_lr_at(5000, settled=True) == pytest.approx(3e-4)
    # settled: 10% of the noisy teacher's greedy ceiling 0.6, i.e. a held-out match of 0.06 (4 of 64 demos)
    assert not c.settles(3 / 64) and c.settles(4 / 64)
    assert TrainConfig(sft_settle=0.1).settles(0.1) and not TrainConfig(sft_settle=0.1).settles(0.09)
    assert not replace(c, sft_settle=0.0).settles(1.0)
    with pytest.raises(ConfigError, match="sft_settle_lr"):
        TrainConfig(sft_settle_lr=0.0)


def test_repeats_spread() -> None:
    def summary(seed: int, rl: float, diff: float, low: float) -> dict:
        arm = {"greedy": {"mean": rl, "ci95": [rl, rl], "episodes": 10}}
        d = {"greedy": {"diff": diff, "ci95": [low, diff + 0.1]}}
        return {"config": {"seed": seed}, "wall_s": 10.0, "arms": {"rl": arm}, "rl_minus_sft_more": d,
                "rl_minus_sft": d}

    runs = [summary(0, 0.5, 0.2, 0.1), summary(1, 0.7, 0.1, -0.05), summary(2, 0.6, 0.3, 0.2)]
    result = RepeatsResult.of(["run-0", "run-1", "run-2"], runs)
    spread = result.arms["rl"]["greedy"]
    assert spread.mean == 0.6 and spread.std == pytest.approx(0.1) and (spread.min, spread.max) == (0.5, 0.7)
    d, above, positive = result.diffs["rl_minus_sft_more"]["greedy"]
    assert d.mean == 0.2 and above == 2 and positive == 3
    data = json.loads(json.dumps(result.to_json()))
    assert data["rl_minus_sft"]["greedy"]["ci95_above_zero"] == 2 and data["seeds"] == [0, 1, 2]


def test_sft_imitates_the_teachers_wrong_demos_too() -> None:
    from learner_support import tiny_policy

    from envfarm.trainer.samples import sft_samples

    call = {"id": "c0", "type": "function", "function": {"name": "submit", "arguments": '{"answer": "7"}'}}
    messages = ({"role": "user", "content": "What is 1+2?"}, {"role": "assistant", "content": None,
                                                              "tool_calls": [call]})
    wrong, broken = _traj(0, "completed", 0.0), _traj(1, "infra_error", 0.0)
    wrong, broken = (replace(t, messages=messages) for t in (wrong, broken))
    assert len(sft_samples([wrong, broken], tiny_policy())) == 1  # the wrong answer is imitated
