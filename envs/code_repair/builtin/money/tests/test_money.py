from decimal import Decimal

import pytest

from money import CurrencyMismatchError, Money, get_currency


def test_construct_rounds_to_minor_unit():
    assert Money("1.005", "USD").amount == Decimal("1.01")
    assert Money("1.004", "USD").amount == Decimal("1.00")
    assert Money("99.5", "JPY").amount == Decimal("100")
    assert Money("0.0005", "KWD").amount == Decimal("0.001")


def test_currency_lookup_is_case_insensitive():
    assert Money("1", "usd").currency is get_currency("USD")
    with pytest.raises(ValueError):
        Money("1", "XXX")


def test_float_rejected():
    with pytest.raises(TypeError):
        Money(0.1, "USD")


def test_immutable():
    m = Money("1", "USD")
    with pytest.raises(AttributeError):
        m.amount = Decimal(2)


def test_add_sub():
    assert Money("1.10", "USD") + Money("2.25", "USD") == Money("3.35", "USD")
    assert Money("1.10", "USD") - Money("2.25", "USD") == Money("-1.15", "USD")


def test_currency_mismatch():
    with pytest.raises(CurrencyMismatchError):
        Money("1", "USD") + Money("1", "EUR")
    with pytest.raises(CurrencyMismatchError):
        Money("1", "USD") < Money("1", "EUR")


def test_multiply_rounds_half_up():
    assert Money("10.00", "USD") * Decimal("0.0125") == Money("0.13", "USD")
    assert 3 * Money("0.10", "USD") == Money("0.30", "USD")


def test_ordering_and_hash():
    a, b = Money("1", "USD"), Money("2", "USD")
    assert a < b and b >= a
    assert len({Money("1.00", "USD"), Money("1", "USD")}) == 1


def test_minor_units_roundtrip():
    m = Money("12.34", "USD")
    assert m.minor_units == 1234
    assert Money.from_minor(1234, "USD") == m
    assert Money.from_minor(1234, "KWD").amount == Decimal("1.234")


def test_split_even():
    assert Money("9.00", "USD").split(3) == [Money("3", "USD")] * 3


def test_split_with_remainder():
    parts = Money("0.10", "USD").split(3)
    assert parts == [Money("0.04", "USD"), Money("0.03", "USD"), Money("0.03", "USD")]


def test_allocate_ratios():
    parts = Money("100.00", "USD").allocate([70, 20, 10])
    assert parts == [Money("70", "USD"), Money("20", "USD"), Money("10", "USD")]


def test_allocate_never_loses_cents():
    total = Money("100.00", "USD")
    parts = total.allocate([1, 1, 1])
    assert sum(p.minor_units for p in parts) == total.minor_units
    assert parts[0] == Money("33.34", "USD")


def test_allocate_negative_amount():
    parts = Money("-0.05", "USD").split(2)
    assert parts == [Money("-0.03", "USD"), Money("-0.02", "USD")]


def test_allocate_zero_ratio_gets_nothing():
    parts = Money("1.00", "USD").allocate([0, 1, 2])
    assert parts[0] == Money("0", "USD")
    assert sum(p.minor_units for p in parts) == 100


def test_allocate_bad_ratios():
    with pytest.raises(ValueError):
        Money("1", "USD").allocate([])
    with pytest.raises(ValueError):
        Money("1", "USD").allocate([0, 0])
    with pytest.raises(ValueError):
        Money("1", "USD").allocate([1, -1])


def test_formatting():
    assert str(Money("1234567.5", "USD")) == "USD 1,234,567.50"
    assert Money("-1234.5", "EUR").format() == "-€1,234.50"
    assert Money("1000", "CHF").format() == "CHF 1,000.00"
    assert repr(Money("5", "JPY")) == "Money('5', 'JPY')"
