"""The built-in transformer: presets, causal masking, the KV-cache path equals the full forward."""

from __future__ import annotations

import pytest
import torch

from envfarm.errors import ConfigError
from envfarm.trainer.model import PRESETS, ModelConfig, Transformer, preset_config
from envfarm.trainer.policy import load_policy

torch.set_num_threads(2)
TINY = {"d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64, "max_context": 64}


def test_tiny_cpu_preset_is_about_0_8m_params() -> None:
    n = Transformer(PRESETS["tiny-cpu"]).num_params()
    assert 0.7e6 < n < 0.9e6
    assert "embed.weight" in Transformer(PRESETS["tiny-cpu"]).state_dict()
    assert not any("lm_head" in k for k in Transformer(PRESETS["tiny-cpu"]).state_dict())


def test_token_shift_is_tiny_cpus_and_configs_saved_before_it_load_without_it() -> None:
    assert "shift.weight" in Transformer(PRESETS["tiny-cpu"]).state_dict()
    saved = {k: v for k, v in PRESETS["tiny-cpu"].to_dict().items() if k != "token_shift"}
    old = Transformer(ModelConfig.from_dict(saved))
    assert old.shift is None and "shift.weight" not in old.state_dict()


def test_token_shift_reads_the_previous_real_token_only() -> None:
    model = load_policy("tiny-cpu", overrides=TINY, device="cpu", seed=4).module
    ids = torch.randint(0, 256, (1, 6))
    with torch.no_grad():
        x = model._embed(ids, None, None)
        padded = model._embed(torch.cat([torch.full((1, 2), 7), ids], 1),
                              torch.tensor([[False, False] + [True] * 6]), None)
    torch.testing.assert_close(x[0], padded[0, 2:])  # a pad token before the first is not its previous
    torch.testing.assert_close(x[0, 0], model.embed(ids)[0, 0])
    assert not torch.allclose(x[0, 1:], model.embed(ids)[0, 1:])


def test_unknown_preset_suggests() -> None:
    with pytest.raises(ConfigError, match="did you mean 'tiny-cpu'"):
        preset_config("tiny-cp")


def test_forward_is_causal_and_shapes() -> None:
    model = load_policy("tiny-cpu", overrides=TINY, device="cpu").module
    ids = torch.randint(0, 256, (2, 10))
    with torch.no_grad():
        out = model(ids)
        changed = ids.clone()
        changed[:, 7:] = 5
        out2 = model(changed)
    assert out.shape == (2, 10, 262)
    torch.testing.assert_close(out[:, :7], out2[:, :7])
    assert not torch.allclose(out[:, 7:], out2[:, 7:])


def test_cache_path_matches_full_forward_with_left_padding() -> None:
    model = load_policy("tiny-cpu", overrides=TINY, device="cpu", seed=3).module
    seq = torch.randint(0, 256, (1, 12))
    with torch.no_grad():
        full = model(seq)[0]
        pad = 3
        ids = torch.cat([torch.zeros(1, pad, dtype=torch.long), seq[:, :8]], 1)
        valid = torch.zeros(1, pad + 12, dtype=torch.bool)
        valid[:, pad:pad + 8] = True
        pos = (valid[:, :pad + 8].long().cumsum(1) - 1).clamp(min=0)
        cache = model.new_cache(1, pad + 12)
        logits = [model(ids, positions=pos, key_mask=valid[:, :pad + 8], cache=cache)[0, pad:]]
        for t in range(8, 12):
            valid[:, pad + t] = True
            step = model(seq[:, t:t + 1], positions=torch.tensor([[t]]), key_mask=valid[:, :pad + t + 1],
                         cache=cache)
            logits.append(step[0])
    torch.testing.assert_close(torch.cat(logits), full, atol=1e-5, rtol=1e-4)


def test_same_seed_same_weights() -> None:
    a = load_policy("tiny-cpu", overrides=TINY, device="cpu", seed=1).module.state_dict()
    b = load_policy("tiny-cpu", overrides=TINY, device="cpu", seed=1).module.state_dict()
    c = load_policy("tiny-cpu", overrides=TINY, device="cpu", seed=2).module.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["embed.weight"], c["embed.weight"])
