"""TRL's GRPOTrainer (environments mode) trains a tiny locally made model on CPU against ToolCalc-v0 served
by envfarm: five steps, rewards from envfarm that differ between rollouts (examples/trl_grpo_toolcalc.py,
the README's example, run as a library)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from openenv_support import ServerThread

from envfarm.openenv.server import OpenEnvServeConfig

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trl_grpo_toolcalc.py"


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("trl_grpo_toolcalc", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.bwrap
def test_grpo_trainer_trains_on_a_served_env(tmp_path: Path) -> None:
    server = ServerThread(OpenEnvServeConfig(
        env_id="envfarm/ToolCalc-v0", backend="bwrap", port=0, max_sessions=16,
        env_kwargs={"difficulty": 1, "tool_help": False})).start()
    try:
        history = _example().train(server.url, steps=5, output_dir=str(tmp_path / "grpo"), seed=0)
        health = server.health()
    finally:
        server.stop()
    steps = [e for e in history if "reward" in e]
    assert [e["step"] for e in steps] == [1, 2, 3, 4, 5]
    rewards = [e["rewards/EnvfarmEnvironment/mean"] for e in steps]  # envfarm's reward, via get_reward
    assert any(e["reward_std"] > 0 for e in steps) and 0 < sum(rewards) < 5, steps
    assert any(e["tools/call_frequency"] > 0 for e in steps) and any(e["loss"] != 0 for e in steps)
    assert health["sessions"] == 0, "the factory closed its sessions"
