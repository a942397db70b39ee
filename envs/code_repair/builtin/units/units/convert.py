"""Conversion functions and a small Quantity value type."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .registry import BY_NAME, Unit


class UnknownUnitError(KeyError):
    pass


class IncompatibleUnitsError(ValueError):
    pass


def lookup(name: str | Unit) -> Unit:
    """Find a unit by symbol or alias. Symbols are case-sensitive ("mm" is not "Mm"); spelled-out names are not."""
    if isinstance(name, Unit):
        return name
    key = name.strip()
    if key in BY_NAME:
        return BY_NAME[key]
    if key.lower() in BY_NAME and len(key) > 2:
        return BY_NAME[key.lower()]
    raise UnknownUnitError(name)


def to_base(value: float, unit: Unit) -> float:
    return (value + unit.offset) * unit.factor


def from_base(value: float, unit: Unit) -> float:
    return value / unit.factor - unit.offset


def convert(value: float, src: str | Unit, dst: str | Unit) -> float:
    """Convert ``value`` from unit ``src`` to unit ``dst``."""
    a, b = lookup(src), lookup(dst)
    if a.dimension != b.dimension:
        raise IncompatibleUnitsError(f"cannot convert {a.dimension} ({a.symbol}) to {b.dimension} ({b.symbol})")
    if a is b:
        return float(value)
    return from_base(to_base(value, a), b)


_QUANTITY = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(\S.*?)\s*$")


def parse(text: str) -> "Quantity":
    """Parse strings like ``"5 km"``, ``"-40 °F"``, ``"1.5e3mm"``, ``"6 feet"``."""
    m = _QUANTITY.match(text)
    if not m:
        raise ValueError(f"cannot parse quantity {text!r}")
    return Quantity(float(m.group(1)), lookup(m.group(2)))


@dataclass(frozen=True)
class Quantity:
    value: float
    unit: Unit

    def to(self, unit: str | Unit) -> "Quantity":
        target = lookup(unit)
        return Quantity(convert(self.value, self.unit, target), target)

    def __add__(self, other: "Quantity") -> "Quantity":
        if not isinstance(other, Quantity):
            return NotImplemented
        if self.unit.offset or other.unit.offset:
            raise IncompatibleUnitsError("cannot add temperatures on offset scales; convert to K first")
        return Quantity(self.value + other.to(self.unit).value, self.unit)

    def __str__(self) -> str:
        return f"{self.value:g} {self.unit.symbol}"
