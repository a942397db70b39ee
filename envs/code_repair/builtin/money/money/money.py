"""The Money value type."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from functools import total_ordering
from typing import Sequence

from .currency import Currency, get_currency

Number = int | str | Decimal


class CurrencyMismatchError(TypeError):
    pass


def _to_decimal(value: Number) -> Decimal:
    if isinstance(value, float):
        raise TypeError("use str or Decimal for money amounts, not float")
    if isinstance(value, bool):
        raise TypeError("bool is not an amount")
    return Decimal(value)


@total_ordering
class Money:
    """An immutable amount of money, always rounded to the currency's minor unit (half-up)."""

    __slots__ = ("amount", "currency")

    def __init__(self, amount: Number, currency: str | Currency):
        cur = get_currency(currency)
        object.__setattr__(self, "currency", cur)
        object.__setattr__(self, "amount", self._quantize(_to_decimal(amount), cur))

    def __setattr__(self, name, value):
        raise AttributeError("Money is immutable")

    @staticmethod
    def _quantize(value: Decimal, currency: Currency) -> Decimal:
        return value.quantize(Decimal(1).scaleb(-currency.exponent), rounding=ROUND_HALF_UP)

    # -- construction from minor units ----------------------------------------------------------------
    @classmethod
    def from_minor(cls, units: int, currency: str | Currency) -> "Money":
        cur = get_currency(currency)
        return cls(Decimal(units).scaleb(-cur.exponent), cur)

    @property
    def minor_units(self) -> int:
        return int(self.amount.scaleb(self.currency.exponent))

    # -- arithmetic ----------------------------------------------------------------------------------
    def _check(self, other: object) -> "Money":
        if not isinstance(other, Money):
            raise TypeError(f"expected Money, got {type(other).__name__}")
        if other.currency != self.currency:
            raise CurrencyMismatchError(f"{self.currency.code} vs {other.currency.code}")
        return other

    def __add__(self, other: "Money") -> "Money":
        other = self._check(other)
        return Money(self.amount + other.amount, self.currency)

    def __sub__(self, other: "Money") -> "Money":
        other = self._check(other)
        return Money(self.amount - other.amount, self.currency)

    def __neg__(self) -> "Money":
        return Money(-self.amount, self.currency)

    def __mul__(self, factor: Number) -> "Money":
        return Money(self.amount * _to_decimal(factor), self.currency)

    __rmul__ = __mul__

    def __bool__(self) -> bool:
        return bool(self.amount)

    # -- comparison ----------------------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Money):
            return NotImplemented
        return self.currency == other.currency and self.amount == other.amount

    def __lt__(self, other: "Money") -> bool:
        other = self._check(other)
        return self.amount < other.amount

    def __hash__(self) -> int:
        return hash((self.amount, self.currency.code))

    # -- allocation ----------------------------------------------------------------------------------
    def allocate(self, ratios: Sequence[int | Decimal | str]) -> list["Money"]:
        """Split into parts proportional to ``ratios``; the parts always add up to exactly ``self``.

        Leftover minor units go one at a time to the earliest parts.
        """
        weights = [_to_decimal(r) for r in ratios]
        if not weights:
            raise ValueError("need at least one ratio")
        if any(w < 0 for w in weights):
            raise ValueError("ratios must be non-negative")
        total_weight = sum(weights)
        if total_weight == 0:
            raise ValueError("ratios must not all be zero")
        sign = -1 if self.amount < 0 else 1
        units = abs(int(self.amount.scaleb(self.currency.exponent)))
        shares = [int(units * w / total_weight) for w in weights]
        remainder = units - sum(shares)
        for i in range(len(shares)):
            if remainder == 0:
                break
            if weights[i] > 0:
                shares[i] += 1
                remainder -= 1
        return [Money.from_minor(sign * s, self.currency) for s in shares]

    def split(self, parts: int) -> list["Money"]:
        if parts < 1:
            raise ValueError("parts must be >= 1")
        return self.allocate([1] * parts)

    # -- formatting ----------------------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"Money('{self.amount}', '{self.currency.code}')"

    def __str__(self) -> str:
        return f"{self.currency.code} {self.amount:,}"

    def format(self) -> str:
        sym = self.currency.symbol or self.currency.code + " "
        sign = "-" if self.amount < 0 else ""
        return f"{sign}{sym}{abs(self.amount):,}"
