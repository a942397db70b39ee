"""The unit table.

Every unit maps to its dimension's base unit (metre, kilogram, kelvin) by

    base = (value + offset) * factor        value = base / factor - offset
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Unit:
    symbol: str
    dimension: str
    factor: float
    offset: float = 0.0
    aliases: tuple[str, ...] = ()


UNITS = [
    Unit("m", "length", 1.0, aliases=("metre", "meter", "metres", "meters")),
    Unit("km", "length", 1000.0, aliases=("kilometre", "kilometer", "kilometres", "kilometers")),
    Unit("cm", "length", 0.01, aliases=("centimetre", "centimeter", "centimetres", "centimeters")),
    Unit("mm", "length", 0.001, aliases=("millimetre", "millimeter", "millimetres", "millimeters")),
    Unit("in", "length", 0.0254, aliases=("inch", "inches", '"')),
    Unit("ft", "length", 0.3048, aliases=("foot", "feet", "'")),
    Unit("yd", "length", 0.9144, aliases=("yard", "yards")),
    Unit("mi", "length", 1609.344, aliases=("mile", "miles")),
    Unit("kg", "mass", 1.0, aliases=("kilogram", "kilograms")),
    Unit("g", "mass", 0.001, aliases=("gram", "grams")),
    Unit("mg", "mass", 1e-6, aliases=("milligram", "milligrams")),
    Unit("t", "mass", 1000.0, aliases=("tonne", "tonnes")),
    Unit("lb", "mass", 0.45359237, aliases=("lbs", "pound", "pounds")),
    Unit("oz", "mass", 0.028349523125, aliases=("ounce", "ounces")),
    Unit("K", "temperature", 1.0, aliases=("kelvin",)),
    Unit("C", "temperature", 1.0, 273.15, aliases=("°C", "degC", "celsius")),
    Unit("F", "temperature", 5 / 9, 459.67, aliases=("°F", "degF", "fahrenheit")),
]

BY_NAME: dict[str, Unit] = {}
for _u in UNITS:
    for _name in (_u.symbol, *_u.aliases):
        BY_NAME[_name] = _u
