"""Checkpoints: weights + optimizer + step round trip; a resumed learner's next update equals the
uninterrupted one; atomic folders and the ``latest`` pointer."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from learner_support import params, rl_batch, tiny_learner

from envfarm.errors import CheckpointError
from envfarm.trainer.checkpoint import latest_checkpoint, load_checkpoint, prune, read_state, save_checkpoint

torch.set_num_threads(1)


def test_resume_gives_the_same_next_update_as_uninterrupted(tmp_path: Path) -> None:
    a = tiny_learner(lr=1e-3)
    first, second = rl_batch(a.module, seed=0), rl_batch(a.module, seed=1)
    a.update(first, "rl")
    save_checkpoint(tmp_path / "rl-000001", a, {"version": 1, "cursor": {"store_lines": 12}})
    a.update(second, "rl")

    b = tiny_learner(seed=5, lr=1e-3)  # other initial weights: everything must come from the checkpoint
    state = load_checkpoint(latest_checkpoint(tmp_path) or tmp_path, b)
    assert state == {"version": 1, "cursor": {"store_lines": 12}} and b.step == 1
    b.update(second, "rl")
    assert torch.equal(params(a.module), params(b.module))
    sa, sb = a.optimizer.state_dict()["state"], b.optimizer.state_dict()["state"]
    assert all(torch.equal(sa[i]["exp_avg_sq"], sb[i]["exp_avg_sq"]) for i in sa)


def test_checkpoints_replace_atomically_and_prune(tmp_path: Path) -> None:
    learner = tiny_learner()
    for step in (1, 2, 3):
        save_checkpoint(tmp_path / f"rl-{step:06d}", learner, {"step": step})
    prune(tmp_path, keep=2, prefix="rl-")
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["rl-000002", "rl-000003"]
    assert latest_checkpoint(tmp_path) == tmp_path / "rl-000003"
    save_checkpoint(tmp_path / "rl-000003", learner, {"step": 33})  # rewritten in place
    assert read_state(tmp_path / "rl-000003") == {"step": 33}
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


def test_a_damaged_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    learner = tiny_learner()
    folder = save_checkpoint(tmp_path / "x", learner, {})
    (folder / "optimizer.safetensors").write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="missing or damaged"):
        load_checkpoint(folder, learner)
    (tmp_path / "latest").write_text("nowhere\n")
    with pytest.raises(CheckpointError, match="holds no checkpoint"):
        latest_checkpoint(tmp_path)
    assert latest_checkpoint(tmp_path / "empty") is None
