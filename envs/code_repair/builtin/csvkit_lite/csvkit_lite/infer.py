"""Type inference for CSV columns.

A column's type is the narrowest of ``int`` < ``float`` < ``bool`` < ``str`` that fits every non-empty
cell. Empty cells (after stripping) become ``None`` and never influence the inferred type.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

_TRUE = {"true", "yes"}
_FALSE = {"false", "no"}


def _is_int(text: str) -> bool:
    digits = text[1:] if text[:1] in "+-" else text
    return digits.isdigit()


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return text.lower() not in {"nan", "inf", "-inf", "+inf", "infinity", "-infinity"}


def _is_bool(text: str) -> bool:
    return text.lower() in _TRUE | _FALSE


def _to_bool(text: str) -> bool:
    return text.lower() in _TRUE


_CHECKS: list[tuple[type, Callable[[str], bool], Callable[[str], Any]]] = [
    (int, _is_int, int),
    (float, _is_float, float),
    (bool, _is_bool, _to_bool),
]


def infer_column(cells: Iterable[str]) -> type:
    """Return the narrowest type that fits every non-empty cell (``str`` if nothing else does)."""
    values = [c.strip() for c in cells if c.strip()]
    if not values:
        return str
    for typ, check, _ in _CHECKS:
        if all(check(v) for v in values):
            return typ
    return str


def parse_value(text: str, typ: type) -> Any:
    text = text.strip()
    if not text:
        return None
    for t, _, convert in _CHECKS:
        if t is typ:
            return convert(text)
    return text
