"""Every CLI option that sets a config field is declared by the field: same help, same default."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from typing import Any

import pytest
from typer.models import OptionInfo

from envfarm.commands.farm import eval_command, run_command
from envfarm.commands.options import config_help, field_default, field_docs
from envfarm.rollout.farm import FarmConfig

ALIASES = {"env": "env_id", "learner_timeout": "learner_timeout_s", "flush_timeout": "flush_timeout_s"}


def _options(command: Callable[..., Any]) -> dict[str, tuple[OptionInfo, Any]]:
    """``{parameter: (typer OptionInfo, the CLI default)}`` of a typer command function."""
    hints = typing.get_type_hints(command, include_extras=True)
    out = {}
    for name, param in inspect.signature(command).parameters.items():
        info = next((m for m in getattr(hints[name], "__metadata__", ()) if isinstance(m, OptionInfo)), None)
        if info is not None:
            out[name] = (info, param.default)
    return out


def _field(name: str) -> str | None:
    field = ALIASES.get(name, name)
    return field if field in {f.name for f in dataclasses.fields(FarmConfig)} else None


@pytest.mark.parametrize("command", [run_command], ids=["farm run"])
def test_farm_options_take_help_and_default_from_farm_config(command: Callable[..., Any]) -> None:
    checked = 0
    for name, (info, default) in _options(command).items():
        field = _field(name)
        if field is None:
            continue
        checked += 1
        assert info.help is not None and info.help.startswith(config_help(FarmConfig, field)), name
        if default is not None:
            assert default == field_default(FarmConfig, field), f"--{name} default differs from FarmConfig"
    assert checked >= 8, "the farm run options that set FarmConfig fields were not found"


def test_eval_shares_the_farm_options() -> None:
    run, ev = _options(run_command), _options(eval_command)
    for name in ("env", "backend", "concurrency", "step_slots", "seed"):
        assert ev[name][0].help == run[name][0].help and ev[name][1] == run[name][1], name


def test_field_docs_read_the_docstring_under_each_field() -> None:
    docs = field_docs(FarmConfig)
    assert docs["concurrency"] == "Episodes in flight at once (one env instance each)."
    assert set(docs) == {f.name for f in dataclasses.fields(FarmConfig)}, "a field has no docstring"
    with pytest.raises(KeyError):
        field_default(FarmConfig, "env_id")  # no default: required


def test_help_shows_the_config_default_when_the_cli_leaves_it_to_the_config() -> None:
    from typer.testing import CliRunner

    from envfarm.cli import app

    text = CliRunner().invoke(app, ["farm", "run", "--help"], env={"COLUMNS": "250"}).output
    assert f"[default: {FarmConfig.backend}]" in text and "[default: 0]" in text
