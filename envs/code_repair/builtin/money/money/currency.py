"""Currencies and their minor-unit exponents (ISO 4217)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Currency:
    code: str
    exponent: int  # digits after the decimal point: USD 2, JPY 0, KWD 3
    symbol: str = ""

    @property
    def minor_per_major(self) -> int:
        return 10 ** self.exponent


CURRENCIES = {
    c.code: c
    for c in [
        Currency("USD", 2, "$"),
        Currency("EUR", 2, "€"),
        Currency("GBP", 2, "£"),
        Currency("CHF", 2),
        Currency("JPY", 0, "¥"),
        Currency("KRW", 0, "₩"),
        Currency("KWD", 3),
        Currency("BHD", 3),
    ]
}


def get_currency(code: str | Currency) -> Currency:
    if isinstance(code, Currency):
        return code
    try:
        return CURRENCIES[code.strip().upper()]
    except KeyError:
        raise ValueError(f"unknown currency {code!r}") from None
