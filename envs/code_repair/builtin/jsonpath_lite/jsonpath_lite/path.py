"""Parsing and evaluation of a small JSONPath subset."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

_MISSING = object()


class JSONPathError(ValueError):
    """Raised for a malformed path expression."""


@dataclass(frozen=True)
class Key:
    name: str


@dataclass(frozen=True)
class Index:
    index: int


@dataclass(frozen=True)
class Slice:
    start: int | None
    stop: int | None
    step: int | None


@dataclass(frozen=True)
class Wildcard:
    pass


Step = Key | Index | Slice | Wildcard


def _parse_int(text: str, expr: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise JSONPathError(f"bad integer {text!r} in {expr!r}") from None


def _parse_bracket(body: str, expr: str) -> Step:
    body = body.strip()
    if body == "*":
        return Wildcard()
    if len(body) >= 2 and body[0] == body[-1] and body[0] in "'\"":
        return Key(body[1:-1])
    if ":" in body:
        parts = body.split(":")
        if len(parts) > 3:
            raise JSONPathError(f"bad slice [{body}] in {expr!r}")
        parts += [""] * (3 - len(parts))
        start, stop, step = (
            _parse_int(p, expr) if p.strip() else None for p in parts
        )
        if step == 0:
            raise JSONPathError(f"slice step cannot be zero in {expr!r}")
        return Slice(start, stop, step)
    if not body:
        raise JSONPathError(f"empty brackets in {expr!r}")
    return Index(_parse_int(body, expr))


def parse(expr: str) -> list[Step]:
    """Parse ``expr`` into a list of steps."""
    if not expr.startswith("$"):
        raise JSONPathError(f"path must start with '$': {expr!r}")
    steps: list[Step] = []
    i, n = 1, len(expr)
    while i < n:
        ch = expr[i]
        if ch == ".":
            j = i + 1
            while j < n and expr[j] not in ".[":
                j += 1
            name = expr[i + 1 : j]
            if not name:
                raise JSONPathError(f"empty key at position {i} in {expr!r}")
            steps.append(Wildcard() if name == "*" else Key(name))
            i = j
        elif ch == "[":
            j = i + 1
            quote = None
            while j < n:
                c = expr[j]
                if quote:
                    if c == quote:
                        quote = None
                elif c in "'\"":
                    quote = c
                elif c == "]":
                    break
                j += 1
            if j >= n:
                raise JSONPathError(f"unclosed '[' at position {i} in {expr!r}")
            steps.append(_parse_bracket(expr[i + 1 : j], expr))
            i = j + 1
        else:
            raise JSONPathError(f"unexpected {ch!r} at position {i} in {expr!r}")
    return steps


def _apply(step: Step, value: Any) -> Iterable[Any]:
    if isinstance(step, Key):
        if isinstance(value, dict) and step.name in value:
            yield value[step.name]
    elif isinstance(step, Index):
        if isinstance(value, list):
            idx = step.index
            if -len(value) <= idx < len(value):
                yield value[idx]
    elif isinstance(step, Slice):
        if isinstance(value, list):
            yield from value[step.start : step.stop : step.step]
    elif isinstance(step, Wildcard):
        if isinstance(value, dict):
            yield from value.values()
        elif isinstance(value, list):
            yield from value


class Path:
    """A compiled path expression."""

    def __init__(self, expr: str):
        self.expr = expr
        self.steps = parse(expr)

    def find(self, document: Any) -> list[Any]:
        current = [document]
        for step in self.steps:
            current = [out for value in current for out in _apply(step, value)]
        return current

    def first(self, document: Any, default: Any = None) -> Any:
        found = self.find(document)
        return found[0] if found else default

    def __repr__(self) -> str:
        return f"Path({self.expr!r})"


def compile(expr: str) -> Path:
    return Path(expr)


def find(expr: str, document: Any) -> list[Any]:
    return Path(expr).find(document)


def first(expr: str, document: Any, default: Any = None) -> Any:
    return Path(expr).first(document, default)
