from __future__ import annotations

import re
from functools import total_ordering

_TABLE = [
    (1000, "M"), (900, "CM"), (500, "D"), (400, "CD"),
    (100, "C"), (90, "XC"), (50, "L"), (40, "XL"),
    (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"),
]
_VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
_CANONICAL = re.compile(r"M{0,3}(CM|CD|D?C{0,3})(XC|XL|L?X{0,3})(IX|IV|V?I{0,3})")

MIN_VALUE = 1
MAX_VALUE = 3999


class InvalidRomanNumeral(ValueError):
    pass


def to_roman(n: int) -> str:
    """Convert 1..3999 to its canonical roman numeral."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"expected an int, got {type(n).__name__}")
    if not MIN_VALUE <= n <= MAX_VALUE:
        raise ValueError(f"{n} is out of range ({MIN_VALUE}..{MAX_VALUE})")
    out = []
    for value, symbol in _TABLE:
        count, n = divmod(n, value)
        out.append(symbol * count)
    return "".join(out)


def _normalise(s: str) -> str:
    if not isinstance(s, str):
        raise TypeError(f"expected a str, got {type(s).__name__}")
    return s.strip().upper()


def is_valid(s: str) -> bool:
    try:
        s = _normalise(s)
    except TypeError:
        return False
    return bool(s) and _CANONICAL.fullmatch(s) is not None


def from_roman(s: str) -> int:
    """Parse a canonical roman numeral (case-insensitive, surrounding whitespace ignored)."""
    text = _normalise(s)
    if not text:
        raise InvalidRomanNumeral("empty roman numeral")
    bad = sorted(set(text) - set(_VALUES))
    if bad:
        raise InvalidRomanNumeral(f"invalid character(s) {''.join(bad)!r} in {s!r}")
    if not _CANONICAL.fullmatch(text):
        raise InvalidRomanNumeral(f"{s!r} is not a canonical roman numeral")
    total = 0
    for i, ch in enumerate(text):
        value = _VALUES[ch]
        if i + 1 < len(text) and value < _VALUES[text[i + 1]]:
            total -= value
        else:
            total += value
    return total


@total_ordering
class Roman:
    """An integer that prints as a roman numeral and supports + and - within range."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = from_roman(value) if isinstance(value, str) else int(value)
        to_roman(self.value)  # range check

    def __int__(self) -> int:
        return self.value

    def __str__(self) -> str:
        return to_roman(self.value)

    def __repr__(self) -> str:
        return f"Roman({str(self)!r})"

    def __eq__(self, other) -> bool:
        if isinstance(other, Roman):
            return self.value == other.value
        if isinstance(other, int):
            return self.value == other
        return NotImplemented

    def __lt__(self, other) -> bool:
        if isinstance(other, Roman):
            return self.value < other.value
        if isinstance(other, int):
            return self.value < other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.value)

    def __add__(self, other) -> "Roman":
        return Roman(self.value + int(other))

    def __sub__(self, other) -> "Roman":
        return Roman(self.value - int(other))
