"""CLI options declared by the config dataclasses: a field's help and default are written once, on the field.

    concurrency: Annotated[int, config_option(FarmConfig, "concurrency", min=1)] = FarmConfig.concurrency

``config_option`` takes the help text from the field's docstring (the string literal under it, as the config
classes document their fields) and adds ``[default: ...]`` when the CLI leaves the default to the config
(an option whose CLI default is None). ``tests/test_cli_config.py`` checks every option named like a
config field against the field.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import textwrap
from collections.abc import Callable
from functools import cache
from typing import Any, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from envfarm.errors import ConfigError

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


@cache
def field_docs(cls: type) -> dict[str, str]:
    """``{field: docstring}`` of a dataclass, from the string literal under each field in its source."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0]
        assert isinstance(body, ast.ClassDef)
        for node, after in zip(body.body, body.body[1:], strict=False):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                docs[node.target.id] = " ".join(after.value.value.split()).replace("``", "`")
    return docs


def field_default(cls: type, name: str) -> Any:
    """The default of field ``name`` (its factory called); KeyError for a field without one."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
            raise KeyError(f"{cls.__name__}.{name} has no default")
    raise KeyError(f"{cls.__name__} has no field {name!r}")


def config_help(cls: type, name: str) -> str:
    """The field's docstring as option help."""
    text = field_docs(cls).get(name)
    if text is None:
        raise KeyError(f"{cls.__name__}.{name} has no docstring to use as help")
    return text


def config_option(cls: type, name: str, *param_decls: str, config_default: bool = False, more: str = "",
                  **kwargs: Any) -> Any:
    """``typer.Option`` for field ``name`` of ``cls``: help from the field, then ``more`` (what only the CLI
    needs to say, e.g. a format); ``config_default``: the CLI's default is None and the config's default
    applies, so help names it."""
    text = config_help(cls, name) + (f" {more}" if more else "")
    if config_default:
        text += f" \\[default: {field_default(cls, name)}]"  # escaped: typer help is rich markup
    return typer.Option(*param_decls, help=text, **kwargs)


def deprecated(old: str, new: str) -> None:
    """The one-line note an old spelling prints (to stderr) before it does what the new one does."""
    typer.echo(f"note: `envfarm {old}` is deprecated and goes in the next release; use `envfarm {new}`",
               err=True)


def old_spelling(value: T | None, old_value: T | None, old: str, new: str) -> T | None:
    """The value of an option whose old spelling is a hidden option: ``old_value`` (after the note) when
    only the old one was given; ConfigError when both were."""
    if old_value is None:
        return value
    deprecated(old, new)
    if value is not None:
        raise ConfigError(f"`{old}` is the old spelling of `{new}`: give one of them")
    return old_value


def alias(command: Callable[P, R], old: str, new: str) -> Callable[P, R]:
    """``command`` under its old name (register it with ``hidden=True``): the same options and the same
    code, after :func:`deprecated`'s note."""

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        deprecated(old, new)
        return command(*args, **kwargs)

    return run


def parse_ids(first: list[str] | None, extra: list[str], flag: str = "--instance-ids") -> list[str] | None:
    """``FLAG A B C`` (also ``FLAG "A B"``, ``FLAG A,B``, ``FLAG A FLAG B``): click gives A to the option and
    leaves B C as extra arguments (the command allows extra arguments)."""
    if extra and not first:
        raise ConfigError(f"unexpected arguments {extra}; ids go after {flag}")
    ids = [*(first or []), *extra]
    return [i for part in ids for i in part.replace(",", " ").split()] or None


def progress_bar(console: Console, *, transient: bool = False, disable: bool = False) -> Progress:
    """The commands' progress display: the task's description, a bar, done of total and the time elapsed."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    return Progress(*columns, console=console, transient=transient, disable=disable)


__all__ = ["alias", "config_help", "config_option", "deprecated", "field_default", "field_docs",
           "old_spelling", "progress_bar"]
