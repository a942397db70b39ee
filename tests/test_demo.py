"""``envfarm demo`` (envfarm/demo/): the parts' pieces without sandboxes (fast), then the harness and
CodeRepair parts on the bundled row with real docker (slow). The whole demo is `make demo`, timed there."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envfarm.cli import app
from envfarm.demo import PARTS, DemoConfig, DemoResult, PartResult, check, next_steps, run_demo, run_part
from envfarm.demo.harness import BUILTIN_ROW, FORGERIES, forgeries, pick_row, target
from envfarm.demo.repair import episode_rows
from envfarm.demo.result import BUNDLED_POLICY
from envfarm.demo.training import metric_rows, train_config
from envfarm.errors import ConfigError
from envfarm.rollout import Trajectory, Turn
from envfarm.trainer.metrics import read_metrics


def test_check_refuses_unknown_parts_and_a_row_without_its_repository(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown demo part nope: choose from farm"):
        check(DemoConfig(parts=("farm", "nope")))
    with pytest.raises(ConfigError, match="--instances needs --repo-source"):
        check(DemoConfig(instances=tmp_path / "rows.jsonl"))
    with pytest.raises(ConfigError, match="is not a policy folder"):
        check(DemoConfig(train_checkpoint=tmp_path))
    assert check(DemoConfig()).stamp and check(DemoConfig(stamp="s")).stamp == "s"


def test_the_command_reports_a_bad_part_as_an_error_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["demo", "--part", "nope", "--out", str(tmp_path)])
    assert res.exit_code == 2, res.output
    assert "unknown demo part nope" in res.output and "Traceback" not in res.output


def test_a_part_that_raises_is_an_error_row_and_the_rest_still_run(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import envfarm.demo as demo

    async def broken(config: DemoConfig, out: Path, progress: object) -> PartResult:
        raise ConfigError("no docker daemon answers\nrun `make setup`")

    async def fine(config: DemoConfig, out: Path, progress: object) -> PartResult:
        return PartResult("repair", "4. repair", ("a",), (("b",),), True)

    monkeypatch.setattr(demo, "_part", lambda name: broken if name == "harness" else fine)
    result = asyncio.run(run_demo(DemoConfig(out=tmp_path, parts=("harness", "repair"), stamp="t")))
    bad, good = result.parts
    assert not result.ok and good.ok and bad.error == "ConfigError: no docker daemon answers"
    assert bad.rows == (("ConfigError: no docker daemon answers",),) and "run `make setup`" in bad.notes
    assert any("envfarm -v demo --part harness" in n for n in bad.notes)
    assert result.folder == tmp_path / "t" and result.folder.is_dir()
    steps = next_steps(result)
    assert steps.rows[0] == ("browse every run of this demo", f"envfarm dashboard --run {tmp_path / 't'}")


def test_every_part_has_a_runner(tmp_path: Path) -> None:
    from envfarm.demo import _part

    assert all(callable(_part(name)) for name in PARTS)
    failed = asyncio.run(run_part("farm", DemoConfig(backend="no-such-backend", episodes=1), tmp_path,
                                  lambda label, done, total: None))
    assert not failed.ok and failed.error and "no-such-backend" in failed.error


def test_the_bundled_row_gets_one_forgery_per_kind() -> None:
    row = asyncio.run(pick_row(DemoConfig()))
    assert row.bundled and row.instance.instance_id == BUILTIN_ROW
    t = target(row.instance)
    assert t.runner == "pytest" and t.package_init == "roman/__init__.py"
    assert t.test_files and all(f.startswith("tests/") for f in t.test_files)
    assert [e.name for e in forgeries(row.instance)] == list(FORGERIES)


def test_training_config_and_its_table() -> None:
    config = train_config(DemoConfig(train_checkpoint=None, rl_updates=2, sft_steps=10, train_seconds=30))
    assert (config.rl_updates, config.sft_steps, config.minutes, config.sft_more) == (2, 10, 0.5, False)
    assert (config.prompts_per_update, config.group_window) == (4, 4.0)  # waits for informative groups
    assert config.checkpoint is None
    bundled = train_config(DemoConfig())
    assert (bundled.checkpoint, bundled.sft_steps) == (str(BUNDLED_POLICY), 0)
    assert (BUNDLED_POLICY / "spec.json").is_file() and (BUNDLED_POLICY / "model.safetensors").is_file()
    warm = train_config(DemoConfig(train_checkpoint=Path("runs/train/checkpoints/sft/policy")))
    assert (warm.checkpoint, warm.sft_steps) == ("runs/train/checkpoints/sft/policy", 0)
    records = [
        {"kind": "update", "phase": "sft", "step": 1, "loss": 5.5},
        {"kind": "update", "phase": "sft", "step": 10, "loss": 0.3},
        {"kind": "update", "phase": "rl", "step": 1, "loss": 0.0, "reward_mean": 0.0, "episodes": 32,
         "skipped": True},
        {"kind": "update", "phase": "rl", "step": 2, "loss": 0.01, "reward_mean": 0.25, "episodes": 32,
         "skipped": False},
        {"kind": "eval", "phase": "rl-greedy", "mean_reward": 0.5, "episodes": 4},
    ]
    assert metric_rows(records) == [
        ("sft", "1", "5.500", "-", "-", "yes"), ("sft", "10", "0.300", "-", "-", "yes"),
        ("rl (GRPO)", "1", "0.000", "0.000", "32", "no (all rewards alike)"),
        ("rl (GRPO)", "2", "0.010", "0.250", "32", "yes"),
        ("eval rl-greedy", "-", "-", "0.500", "4", "-"),
    ]


def test_episode_rows_show_each_call() -> None:
    bash = json.dumps({"name": "bash", "arguments": {"command": "git apply x"}})
    turns = (Turn(bash, "Applied", 0.0, False, False),
             Turn(json.dumps({"name": "submit", "arguments": {}}), "Resolved: every hidden test passes.", 1.0,
                  True, False))
    traj = Trajectory("r:0", "envfarm/CodeRepair-v0", 0, 0, "t", "completed", turns=turns)
    assert episode_rows(traj) == (("1", "bash(command=git apply x)", "0", "Applied"),
                                  ("2", "submit()", "1", "Resolved: every hidden test passes."))


@pytest.mark.docker
@pytest.mark.slow
def test_harness_and_code_repair_parts_on_the_bundled_row(tmp_path: Path) -> None:
    """Gold resolves; every forgery is caught by a named rule; the oracle episode is resolved."""
    result: DemoResult = asyncio.run(run_demo(DemoConfig(out=tmp_path, parts=("harness", "repair"))))
    harness, repair = result.parts
    assert harness.error is None and repair.error is None, (harness.error, repair.error)
    rows = {r[0]: r for r in harness.rows}
    assert rows["gold"][3] == "resolved"
    expected = {"conftest": "conftest", "gut-test-files": "test-files", "rewrite-testreport": "canary",
                "toml-addopts-plugin": "pytest-config"}
    for name, rule in expected.items():
        assert rows[name][3] == "unresolved" and rule in rows[name][4], rows[name]
    assert rows["conftest"][2] == "resolved"  # swebench alone is fooled by it (its issue 631)
    assert harness.ok and repair.ok, repair.rows
    assert [r[1].split("(")[0] for r in repair.rows] == ["create", "bash", "submit"]
    assert (result.folder / "coderepair" / "spool.jsonl").is_file()
    assert (result.folder / "harness" / "demo" / "gold" / BUILTIN_ROW / "report.json").is_file()


@pytest.mark.bwrap
@pytest.mark.slow
def test_the_demo_command_farm_containment_and_training_at_small_scale(tmp_path: Path) -> None:
    """The other parts through the CLI, scaled down (the harness and CodeRepair parts are tested above): a
    table per part, the reward curve PNG, exit code 0, and RL from the bundled policy takes optimizer steps
    (each update waits for 4 groups whose attempts score differently among up to 16; about 7 groups in 10
    score alike, so both updates without a step has odds of about 1e-5)."""
    parts = ["--part", "farm", "--part", "containment", "--part", "training"]
    res = CliRunner().invoke(app, ["demo", "--out", str(tmp_path), "--episodes", "8", "--concurrency", "8",
                                   "--rl-updates", "2", *parts])
    assert res.exit_code == 0, res.output
    for title in ("1. rollout farm", "2. hostile commands", "5. training", "6. where to look next",
                  "all 3 parts ok", "envfarm dashboard --run"):
        assert title in res.output, title
    (folder,) = tmp_path.iterdir()
    assert (folder / "train" / "reward_curve.png").stat().st_size > 0
    updates = [r for r in read_metrics(folder / "train" / "metrics.jsonl") if r.get("phase") == "rl"]
    assert updates and any(not r.get("skipped") for r in updates), updates
    assert (folder / "farm-ToolCalc-v0" / "spool.jsonl").is_file() and folder.name in res.output
