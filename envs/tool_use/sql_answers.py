"""Expected answers of SqlQuery questions and how a submitted answer is checked.

Normalisation, by kind:

- ``integer``: the submitted text must be a number equal to the count (``12``, ``12.0``, ``1,200``).
- ``number`` (money and averages, asked "rounded to 2 decimal places"): the submitted number must lie within
  :data:`NUMBER_TOLERANCE` (0.006) of the exact value. Any correct rounding to 2 decimals, and any longer
  expansion, passes (float noise from SQL included); an answer one cent off fails. ``$``, thousands
  separators and a trailing unit word are ignored.
- ``text``: case-, whitespace- and quote-insensitive equality (``'ada  KHAN'.`` matches ``Ada Khan``).
- ``ordered`` / ``unordered`` lists: items split on commas, semicolons or newlines (or a JSON list), each
  normalised as text; ``ordered`` compares the sequences, ``unordered`` the sets (the question says "in
  any order").
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

NUMBER_TOLERANCE = Fraction(6, 1000)
NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
SPLIT = re.compile(r"[,;\n]")
QUOTES = "\"'`\u201c\u201d\u2018\u2019"  # straight, back and curly quotes


@dataclass(frozen=True)
class Answer:
    """The expected answer: its kind, its canonical text value(s) and, for numbers, the exact value."""

    kind: str
    values: tuple[str, ...]
    exact: Fraction | None = None

    @classmethod
    def integer(cls, n: int) -> Answer:
        return cls("integer", (str(n),), Fraction(n))

    @classmethod
    def number(cls, value: Fraction) -> Answer:
        exact = Decimal(value.numerator) / Decimal(value.denominator)
        return cls("number", (str(exact.quantize(Decimal("0.01"), ROUND_HALF_UP)),), value)

    @classmethod
    def text(cls, value: str) -> Answer:
        return cls("text", (value,))

    @classmethod
    def ordered(cls, values: Sequence[str]) -> Answer:
        return cls("ordered", tuple(values))

    @classmethod
    def unordered(cls, values: Sequence[str]) -> Answer:
        return cls("unordered", tuple(sorted(values)))

    @property
    def display(self) -> str:
        """The answer as a person would submit it."""
        return ", ".join(self.values)

    def check(self, given: str) -> bool:
        """True when ``given`` matches this answer after normalisation (see module docstring)."""
        if self.kind in ("integer", "number"):
            value = parse_number(given)
            if value is None or self.exact is None:
                return False
            if self.kind == "integer":
                return value == self.exact
            return abs(value - self.exact) <= NUMBER_TOLERANCE
        if self.kind == "text":
            return norm(given) == norm(self.values[0])
        items = [norm(x) for x in split_list(given)]
        expected = [norm(x) for x in self.values]
        if self.kind == "ordered":
            return items == expected
        return set(items) == set(expected)


def norm(text: str) -> str:
    """Case-folded text with whitespace collapsed and surrounding quotes and a final period removed."""
    text = " ".join(text.split()).strip().rstrip(".").strip()
    while len(text) >= 2 and text[0] in QUOTES and text[-1] in QUOTES:
        text = text[1:-1].strip()
    return text.casefold()


def split_list(text: str) -> list[str]:
    """The items of a list answer: a JSON list, or text split on commas, semicolons and newlines."""
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            loaded = json.loads(stripped)
        except json.JSONDecodeError:
            stripped = stripped.strip("[]")
        else:
            if isinstance(loaded, list):
                return [str(x) for x in loaded]
    return [part for part in (p.strip() for p in SPLIT.split(stripped)) if part]


def parse_number(text: str) -> Fraction | None:
    """The single number in ``text`` (``$1,234.50``, ``12 units``, ``84/2``), or None."""
    cleaned = text.strip().replace(",", "").replace("_", "").replace("$", "").rstrip(".")
    if "/" in cleaned:
        try:
            return Fraction(cleaned.replace(" ", ""))
        except (ValueError, ZeroDivisionError):
            return None
    found = NUMBER.findall(cleaned)
    if len(found) != 1:
        return None
    return Fraction(found[0])
