"""A Money type: an exact decimal amount in a currency, with per-currency rounding and lossless allocation."""

from .currency import CURRENCIES, Currency, get_currency
from .money import CurrencyMismatchError, Money

__all__ = ["CURRENCIES", "Currency", "CurrencyMismatchError", "Money", "get_currency"]
