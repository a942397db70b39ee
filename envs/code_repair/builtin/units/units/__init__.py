"""Unit conversion for length, mass and temperature (with offset scales for Celsius and Fahrenheit)."""

from .convert import IncompatibleUnitsError, Quantity, UnknownUnitError, convert, lookup, parse

__all__ = ["IncompatibleUnitsError", "Quantity", "UnknownUnitError", "convert", "lookup", "parse"]
