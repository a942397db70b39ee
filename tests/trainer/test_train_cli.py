"""`envfarm train`'s options are generated from :class:`TrainConfig`: one option per field, declared once."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from envfarm.cli import app
from envfarm.commands import train as train_cmd
from envfarm.trainer import loop
from envfarm.trainer.train_config import TrainConfig


def test_one_option_per_config_field() -> None:
    assert [p.name for p in train_cmd.config_options()] == [f.name for f in fields(TrainConfig)]
    command = typer.main.get_command(app).commands["train"]  # type: ignore[attr-defined]
    params = {p.name: p for p in command.params}
    assert set(params) == {f.name for f in fields(TrainConfig)} | {"out", "resume", "repeats", "quiet"}
    names = [o for p in command.params for o in p.opts]
    assert len(names) == len(set(names)) and "--env" in names and "--sft-lr" in names
    assert all(params[f.name].help.strip(". ") for f in fields(TrainConfig))  # every field documented
    assert params["sync"].secondary_opts == ["--no-sync"]


class _Captured(Exception):
    pass


def test_options_reach_the_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    async def fake(config: TrainConfig, out: Path, **_: Any) -> None:
        seen["config"], seen["out"] = config, out
        raise _Captured

    monkeypatch.setattr(loop, "train", fake)
    result = CliRunner().invoke(app, ["train", "--out", str(tmp_path / "r"), "--env", "envfarm/SqlQuery-v0",
                                      "--lr", "0.5", "--sync", "--env-kwargs", '{"difficulty": 2}',
                                      "--loss-agg", "token", "--minutes", "3", "--checkpoint", "models/m",
                                      "--quiet"])
    assert isinstance(result.exception, _Captured), result.output
    c = seen["config"]
    assert (c.env_id, c.lr, c.sync, c.loss_agg, c.minutes) == ("envfarm/SqlQuery-v0", 0.5, True, "token", 3.0)
    assert c.checkpoint == "models/m"  # a Path on the command line (as in `policy serve`), a str here
    assert c.env_kwargs == {"tool_help": False, "difficulty": 2}
    assert c.sft_steps == TrainConfig().sft_steps  # not given: the config's default


def test_bad_option_value_exits_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["train", "--out", str(tmp_path / "r"), "--group-size", "1", "--quiet"])
    assert result.exit_code == 2 and "group_size" in result.output
