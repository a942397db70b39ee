import pytest

from roman import InvalidRomanNumeral, Roman, from_roman, is_valid, to_roman


@pytest.mark.parametrize("n, s", [
    (1, "I"), (3, "III"), (4, "IV"), (9, "IX"), (14, "XIV"), (40, "XL"), (90, "XC"),
    (1994, "MCMXCIV"), (2024, "MMXXIV"), (3999, "MMMCMXCIX"),
])
def test_to_roman(n, s):
    assert to_roman(n) == s


def test_to_roman_range_and_type():
    for bad in (0, -1, 4000):
        with pytest.raises(ValueError):
            to_roman(bad)
    for bad in (1.0, "5", True):
        with pytest.raises(TypeError):
            to_roman(bad)


def test_from_roman_basic():
    assert from_roman("MCMXCIV") == 1994
    assert from_roman("  mmxxiv ") == 2024


@pytest.mark.parametrize("bad", ["IIII", "VV", "IC", "XM", "IL", "MMMM", "VX", "IIV", "CMC"])
def test_non_canonical_rejected(bad):
    with pytest.raises(InvalidRomanNumeral):
        from_roman(bad)
    assert not is_valid(bad)


def test_invalid_characters():
    with pytest.raises(InvalidRomanNumeral, match="invalid character"):
        from_roman("XIZ")


def test_is_valid():
    assert is_valid("xiv")
    assert not is_valid(14)


def test_round_trip_small():
    for n in range(1, 400):
        assert from_roman(to_roman(n)) == n


def test_roman_class():
    r = Roman("XII")
    assert int(r) == 12 and str(r) == "XII"
    assert r + 3 == Roman(15)
    assert str(r - Roman("II")) == "X"
    assert Roman(5) < Roman("VI") and Roman(7) > 6
    with pytest.raises(ValueError):
        r - 12
