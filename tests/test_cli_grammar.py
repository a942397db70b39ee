"""One CLI grammar: the whole ``envfarm`` command tree (hidden aliases included), one meaning per word.

Rules, each failure naming the command and the option:

1. An option name is a flag everywhere or takes a value everywhere (``--json`` was a flag in four commands and
   a file in a fifth; ``--env`` an env id in five and a flag in one).
2. An option name takes one value type everywhere (a list of T counts as T; ``--checkpoint`` a ``Path`` here
   and a ``str`` there is a failure); a ``Path`` is a folder everywhere or a file everywhere, as its help says
   ("folder" / "file", "JSON", "JSONL"), and a ``--*-dir`` option is a folder.
3. The names in :data:`MEANINGS` mean what they say: flag or value, the value's type, and a help text that
   says so. ``--out`` is always a folder (its help says "folder" and never "file"/"JSON"); a single file a
   command writes is named for what it holds (``--report``, ``--trajectories``, ``--instances``, ...).
4. No sub-command is an abbreviation (``ls``): ``list``.
5. Every ``--backend`` defaults to :data:`envfarm.sandbox.values.DEFAULT_BACKEND`; one that defaults to None
   (the config decides) shows that default in its help.

An old spelling kept for a release is hidden and listed with its new spelling: an option in
:data:`DEPRECATED` (exempt from rules 1-3 and 5: it keeps its old meaning), a command in
:data:`DEPRECATED_COMMANDS` (exempt from rule 4). Every hidden command is such an alias.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from envfarm.cli import app
from envfarm.sandbox.values import DEFAULT_BACKEND


@dataclass(frozen=True)
class Meaning:
    """What an option name means wherever it appears."""

    type: type | None
    """The value's type; None: a flag."""
    help: str
    """A regex the option's help must match."""
    not_help: str | None = None
    """A regex its help must not match."""


MEANINGS: dict[str, Meaning] = {
    "--out": Meaning(Path, r"(?i)\bfolders?\b", r"(?i)(?<![-\w])files?\b|\bjsonl\b"),
    "--json": Meaning(None, r"^Print JSON"),
    "--report": Meaning(Path, r"JSON.*\bfile\b"),
    "--trajectories": Meaning(Path, r"JSONL file"),
    "--summary": Meaning(Path, r"JSON.*\bfile\b"),
    "--instances": Meaning(Path, r"(?i)\binstances\b|\bSWE-bench\b"),
    "--env": Meaning(str, r"(?i)\benv id\b"),
    "--episodes": Meaning(int, r"(?i)\bepisodes\b", r"^Tasks"),
    "--num-tasks": Meaning(int, r"^Tasks"),
    "--tasks": Meaning(Path, r"(?i)\bharbor task"),
    "--backend": Meaning(str, r"(?i)\bbackend\b"),
    "--resume": Meaning(Path, r"(?i)\bfolder\b"),
    "--run-dir": Meaning(Path, r"(?i)\bfolder\b"),
    "--all": Meaning(None, r"."),
    "--harness": Meaning(None, r"(?i)\bharness\b"),
    "--force": Meaning(None, r"(?i)\brebuild\b"),
    "--quiet": Meaning(None, r"(?i)\bno live\b"),
}
"""Option names with one documented meaning (the grammar table in ``envfarm/cli.py``'s docstring)."""

DEPRECATED: dict[tuple[str, str], str] = {
    ("farm run", "--out"): "farm run --trajectories FILE",
    ("eval", "--out"): "eval --report FILE",
    ("eval", "--episodes"): "eval --num-tasks N",
    ("tasks repos", "--tasks"): "tasks repos --instances FILE",
    ("sandbox gc", "--backend"): "sandbox gc BACKEND",
    ("harness images build", "--json"): "images build --harness --report FILE",
    ("harness images list", "--images"): "images list --harness --each",
    ("harness images prune", "--env"): "images prune --harness --all",
}
"""Old spellings kept as hidden options for one release: (command, option) -> the new spelling."""

DEPRECATED_COMMANDS: dict[str, str] = {
    "serve": "policy serve",
    "openenv": "envs serve",
    "harness images": "images build|list|prune --harness",
    "sandbox ls": "sandbox list",
}
"""Old command names kept as hidden commands or groups for one release -> the new spelling."""

ABBREVIATIONS = {"ls": "list", "rm": "remove", "ps": "list"}


@dataclass(frozen=True)
class Option:
    command: str
    name: str
    flag: bool
    type: str
    default: Any
    show_default: Any
    help: str
    hidden: bool


def _commands(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command and group of the tree, hidden ones too, with the words that reach it."""
    yield path, cmd
    for name, sub in (getattr(cmd, "commands", None) or {}).items():
        yield from _commands(sub, (*path, name))


def _type_name(annotation: Any) -> str:
    """``Path`` for ``Path | None`` and ``list[Path] | None``; an Enum is its own type."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    if typing.get_origin(annotation) in (list, tuple):
        annotation = typing.get_args(annotation)[0]
    return getattr(annotation, "__name__", repr(annotation))


def tree_options(root: Any) -> list[Option]:
    found = []
    for path, cmd in _commands(root):
        for p in cmd.params:
            if p.param_type_name != "option":
                continue
            flag = bool(p.is_flag or p.count)
            kind = "flag" if flag else _type_name(p.type_descriptor.annotation)
            for name in [*p.opts, *p.secondary_opts]:
                found.append(Option(" ".join(path), name, flag, kind, p.default, p.show_default,
                                    " ".join((p.help or "").split()), bool(p.hidden)))
    return found


ROOT = typer.main.get_command(app)
OPTIONS = tree_options(ROOT)


def _current(options: list[Option]) -> list[Option]:
    """The options the grammar holds for: all but the deprecated spellings (once they are hidden)."""
    return [o for o in options if not (o.hidden and (o.command, o.name) in DEPRECATED)]


def _path_kind(help: str) -> str | None:
    """What a Path option's help says it names: "folder", "file", or None (it says neither, or both)."""
    folder = re.search(r"(?i)\bfolders?\b", help) is not None
    file = re.search(r"(?i)(?<![-\w])files?\b|\bjsonl?\b", help) is not None
    return None if folder == file else "folder" if folder else "file"


def grammar_errors(options: list[Option], commands: list[tuple[tuple[str, ...], bool]]) -> list[str]:
    """Every breach of the rules in the module docstring (empty: the grammar holds)."""
    errors: list[str] = []
    live = _current(options)
    by_name: dict[str, list[Option]] = {}
    for o in live:
        by_name.setdefault(o.name, []).append(o)
    for name, uses in sorted(by_name.items()):
        kinds = {o.type for o in uses}
        if len(kinds) > 1:
            where = "; ".join(f"{o.command or 'envfarm'}: {o.type}" for o in uses)
            rule = "a flag in one command and a value in another" if "flag" in kinds else "two value types"
            errors.append(f"{name} is {rule} ({where})")
        paths = {o.command: _path_kind(o.help) for o in uses if o.type == "Path"}
        if len(set(paths.values()) - {None}) > 1:
            where = "; ".join(f"{command}: {kind}" for command, kind in paths.items() if kind)
            errors.append(f"{name} is a folder in one command and a file in another ({where})")
        if name.endswith("-dir") and any(kind != "folder" for kind in paths.values()):
            errors.append(f"{name}: a --*-dir option's help must say it is a folder ({paths})")
    for o in live:
        meaning = MEANINGS.get(o.name)
        if meaning is None:
            continue
        want = "flag" if meaning.type is None else meaning.type.__name__
        if o.type != want:
            errors.append(f"{o.command} {o.name}: a {o.type}, but {o.name} means a {want}")
        if not re.search(meaning.help, o.help) or (meaning.not_help and re.search(meaning.not_help, o.help)):
            rule = f"match {meaning.help!r}" + (f", not {meaning.not_help!r}" if meaning.not_help else "")
            errors.append(f"{o.command} {o.name}: help {o.help!r} does not say what {o.name} means ({rule})")
    for o in live:
        if o.name == "--backend" and o.default != DEFAULT_BACKEND:
            shown = o.show_default == DEFAULT_BACKEND or f"[default: {DEFAULT_BACKEND}]" in o.help
            if o.default is not None or not shown:
                errors.append(f"{o.command} --backend defaults to {o.default!r}, not {DEFAULT_BACKEND!r}")
    for path, hidden in commands:
        if hidden and " ".join(path) in DEPRECATED_COMMANDS:
            continue
        if path and path[-1] in ABBREVIATIONS:
            errors.append(f"`envfarm {' '.join(path)}`: name it `{ABBREVIATIONS[path[-1]]}`")
    return errors


def test_the_cli_has_one_grammar() -> None:
    commands = [(path, bool(getattr(cmd, "hidden", False))) for path, cmd in _commands(ROOT)]
    errors = grammar_errors(OPTIONS, commands)
    assert not errors, "the CLI grammar is broken:\n  " + "\n  ".join(errors)


def test_deprecated_spellings_are_hidden_options_of_their_command() -> None:
    found = {(o.command, o.name): o for o in OPTIONS}
    for key, new in DEPRECATED.items():
        assert key in found, f"{key} is listed as deprecated but the command has no such option (drop it)"
        assert found[key].hidden, f"{' '.join(key)} is deprecated (use {new}): it must be hidden"


def test_hidden_commands_are_the_listed_old_spellings() -> None:
    commands = {" ".join(path): cmd for path, cmd in _commands(ROOT)}
    for name in ("farm run", "eval", "train", "images build", "sandbox exec", "harness run", "policy serve",
                 "envs serve", "sandbox list", "harness images build", "openenv serve"):
        assert name in commands, f"the walk misses `envfarm {name}`"
    hidden = {name for name, cmd in commands.items() if getattr(cmd, "hidden", False)}
    assert hidden == set(DEPRECATED_COMMANDS), "a hidden command is no listed old spelling, or one is shown"


# The rules fail on the grammar this file replaced (each line one of the findings).
def _old(command: str, name: str, kind: str, help: str, default: Any = None) -> Option:
    return Option(command, name, kind == "flag", kind, default, True, help, False)


OLD = [
    _old("envs list", "--json", "flag", "Print JSON instead of a table."),
    _old("harness images build", "--json", "Path", "Also write every build's outcome here (JSON)."),
    _old("farm run", "--env", "str", "A registered env id (`envfarm envs list`)."),
    _old("harness images prune", "--env", "flag", "Remove env images too."),
    _old("farm run", "--out", "Path", "JSONL file of trajectories, one per line."),
    _old("train", "--out", "Path", "Training folder to create."),
    _old("eval", "--out", "Path", "Write the report JSON here too (it is in RUN/eval.json)."),
    _old("eval", "--episodes", "int", "Tasks (seeds seed .. seed+N-1)."),
    _old("sandbox exec", "--backend", "str", "Sandbox backend.", "docker"),
]


def test_the_rules_catch_the_old_grammar() -> None:
    errors = "\n".join(grammar_errors(OLD, [(("sandbox", "ls"), False)]))
    assert "--json is a flag in one command and a value in another" in errors
    assert "--env is a flag in one command and a value in another" in errors
    assert "farm run --out: help" in errors and "train --out" not in errors
    assert "--out is a folder in one command and a file in another (farm run: file; train: folder; eval: " \
        "file)" in errors
    assert "eval --episodes: help" in errors
    assert "sandbox exec --backend defaults to 'docker'" in errors
    assert "`envfarm sandbox ls`: name it `list`" in errors


def test_help_of_every_command_renders() -> None:
    """Every command's --help prints (a broken option declaration fails here, not in a user's terminal)."""
    runner = CliRunner()
    for path, _ in _commands(ROOT):
        result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0, f"envfarm {' '.join(path)} --help: {result.output}"


# ------------------------------------------------------------------------------------------ old spellings
# Each old spelling runs the same code as its new one: the library call a command ends in is replaced by a
# recorder (which stops the command), and both spellings must hand it the same arguments; the old one also
# prints a one-line note naming the new spelling.


class Stop(Exception):
    """Raised by a recorder: the command got as far as the library call."""


def _recorder(calls: list[Any], result: Any = Stop) -> Any:
    def record(*args: Any, **kwargs: Any) -> Any:
        calls.append((args, kwargs))
        if result is Stop:
            raise Stop
        return result
    return record


async def _async_stop(*args: Any, **kwargs: Any) -> Any:
    raise Stop


EVAL = ["--env", "envfarm/ToolCalc-v0", "--policy", "oracle", "--run-dir", "run"]
ALIASES: list[tuple[str, list[str], list[str], str]] = [
    ("harness images build",
     ["harness", "images", "build", "--instances", "r.jsonl", "--instance-ids", "a", "b", "--json", "o"],
     ["images", "build", "--harness", "--instances", "r.jsonl", "--instance-ids", "a", "b", "--report", "o"],
     "envfarm.commands.harness.build_env_images"),
    ("harness images list", ["harness", "images", "list", "--images", "--json"],
     ["images", "list", "--harness", "--each", "--json"], "envfarm.commands.harness.list_env_images"),
    ("harness images prune", ["harness", "images", "prune", "--env", "--repo", "a/b"],
     ["images", "prune", "--harness", "--all", "--repo", "a/b"], "envfarm.commands.harness.prune_env_images"),
    ("sandbox ls", ["sandbox", "ls"], ["sandbox", "list"], "envfarm.commands.sandbox.list_containers"),
    ("sandbox gc --backend", ["sandbox", "gc", "--backend", "bwrap"], ["sandbox", "gc", "bwrap"],
     "envfarm.commands.sandbox.gc_backends"),
    ("farm run --out", ["farm", "run", "--out", "t.jsonl"], ["farm", "run", "--trajectories", "t.jsonl"],
     "envfarm.commands.farm._files"),
    ("eval --episodes --out", ["eval", "--episodes", "3", "--out", "r.json", *EVAL],
     ["eval", "--num-tasks", "3", "--report", "r.json", *EVAL], "envfarm.commands.farm.eval_farm"),
    ("tasks mine --out FILE", ["tasks", "mine", "--package", "a==1", "--out", "t.jsonl", "--no-validate"],
     ["tasks", "mine", "--package", "a==1", "--instances", "t.jsonl", "--no-validate"],
     "envfarm.envs.code_repair.factory.mine.MineConfig"),
    ("tasks repos --tasks", ["tasks", "repos", "--tasks", "t.jsonl", "--out", "o"],
     ["tasks", "repos", "--instances", "t.jsonl", "--out", "o"], "envfarm.harness.instances.read_rows"),
    ("openenv serve", ["openenv", "serve", "--env", "e/E-v0", "--port", "0"],
     ["envs", "serve", "--env", "e/E-v0", "--port", "0"], "envfarm.openenv.server.serve"),
]


@pytest.mark.parametrize(("name", "old", "new", "target"), ALIASES, ids=[a[0] for a in ALIASES])
def test_an_old_spelling_runs_the_same_code_after_a_note(
        name: str, old: list[str], new: list[str], target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    if target.endswith("._files"):
        monkeypatch.setattr(target, _recorder(calls, None))
        monkeypatch.setattr("envfarm.commands.farm._pick", _recorder([]))  # stops right after the check
    elif target.endswith(".serve") and "openenv" in target:
        monkeypatch.setattr(target, lambda config, ready: (calls.append(((config,), {})), _async_stop())[1])
    elif target.endswith("list_containers"):
        monkeypatch.setattr(target, _recorder(calls, []))
    elif target.endswith(".eval_farm"):  # its config and run folder (the policy object is new each time)
        monkeypatch.setattr(target, lambda config, pol, folder, **kw: _recorder(calls)(config, folder, **kw))
        monkeypatch.setattr("envfarm.commands.farm._files", _recorder(calls, None))
    else:
        monkeypatch.setattr(target, _recorder(calls))
    runner = CliRunner()
    got_new = runner.invoke(app, new, env={"COLUMNS": "200"})
    new_calls = list(calls)
    calls.clear()
    got_old = runner.invoke(app, old, env={"COLUMNS": "200"})
    assert new_calls, f"`envfarm {' '.join(new)}` never reached {target}: {got_new.output}"
    assert calls == new_calls, f"`envfarm {' '.join(old)}` called {target} differently"
    assert "deprecated" not in got_new.output
    note = [line for line in got_old.output.splitlines() if line.startswith("note: ")]
    assert note and "is deprecated" in note[0] and f"`envfarm {new[0]}" in note[0], got_old.output


def test_the_old_policy_server_spelling_runs_the_same_code() -> None:
    """``envfarm serve`` is ``envfarm policy serve``: the same check fails the same way (no model loaded)."""
    runner = CliRunner()
    new = runner.invoke(app, ["policy", "serve", "--engine", "vllm"])
    old = runner.invoke(app, ["serve", "--engine", "vllm"])
    assert new.exit_code == old.exit_code == 2
    assert "give --checkpoint HF_DIR" in new.output and new.output in old.output
    assert "use `envfarm policy serve`" in old.output
