"""Weights on the wire and on disk: safetensors round trips (tied tensors too), checks, checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from envfarm.errors import ConfigError, TrainerError, WeightsError
from envfarm.trainer.policy import load_policy, save_policy
from envfarm.trainer.weights import decode_state, encode_state, load_into, publish, weights_url

torch.set_num_threads(2)
TINY = {"d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64, "max_context": 64}


def test_round_trip_moves_a_policy_to_other_weights() -> None:
    a, b = load_policy("tiny-cpu", overrides=TINY, seed=0, device="cpu"), load_policy(
        "tiny-cpu", overrides=TINY, seed=1, device="cpu")
    ids = torch.randint(0, 256, (1, 20))
    load_into(a, decode_state(encode_state(b.module)), version=3)
    assert a.version == 3
    with torch.no_grad():
        assert torch.equal(a.module(ids), b.module(ids))


def test_tied_tensors_are_stored_once_and_restored() -> None:
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(10, 4)
            self.head = nn.Linear(4, 10, bias=False)
            self.head.weight = self.emb.weight

    src = Tied()
    blob = encode_state(src)
    state = decode_state(blob)
    assert set(state) == {"emb.weight", "head.weight"} and torch.equal(state["head.weight"], src.emb.weight)
    assert len(blob) < 10 * 4 * 4 * 2  # one copy of the 10x4 float matrix (+ header)


def test_bad_weights_name_the_problem() -> None:
    policy = load_policy("tiny-cpu", overrides=TINY, device="cpu")
    with pytest.raises(WeightsError, match="safetensors"):
        decode_state(b"not weights")
    state = decode_state(encode_state(policy.module))
    state.pop("norm.weight")
    state["extra"] = torch.zeros(1)
    with pytest.raises(WeightsError, match=r"missing \['norm.weight'\], unexpected \['extra'\]"):
        load_into(policy, state, 1)
    assert policy.version == 0


def test_checkpoint_folder_round_trip(tmp_path: Path) -> None:
    policy = load_policy("tiny-cpu", overrides=TINY, seed=4, device="cpu")
    policy.version = 7
    save_policy(policy, tmp_path / "ckpt")
    again = load_policy(path=tmp_path / "ckpt", device="cpu", seed=99)  # the seed does not matter
    assert again.version == 7 and again.spec.config == policy.spec.config and again.name == "envfarm-tiny-cpu"
    ids = torch.randint(0, 256, (2, 16))
    with torch.no_grad():
        assert torch.equal(again.module(ids), policy.module(ids))
    save_policy(policy, tmp_path / "learner-ckpt" / "policy")  # the learner's layout: CKPT/policy/
    assert load_policy(path=tmp_path / "learner-ckpt", device="cpu").version == 7
    with pytest.raises(ConfigError, match=r"neither spec\.json"):
        load_policy(path=tmp_path)
    with pytest.raises(ConfigError, match="does not exist"):
        load_policy(path=tmp_path / "nope")


async def test_publish_to_nothing_is_a_trainer_error() -> None:
    assert weights_url("http://h:1/v1") == weights_url("http://h:1/") == "http://h:1/weights"
    with pytest.raises(TrainerError, match="is `envfarm policy serve` running"):
        await publish("http://127.0.0.1:9", encode_state({"x": torch.zeros(1)}), 1, timeout_s=5)
