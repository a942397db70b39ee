import pytest

from units import IncompatibleUnitsError, UnknownUnitError, convert, lookup, parse


def test_length():
    assert convert(1, "km", "m") == pytest.approx(1000)
    assert convert(12, "in", "ft") == pytest.approx(1)
    assert convert(1, "mi", "km") == pytest.approx(1.609344)
    assert convert(3, "ft", "yd") == pytest.approx(1)


def test_mass():
    assert convert(1, "lb", "oz") == pytest.approx(16)
    assert convert(2500, "g", "kg") == pytest.approx(2.5)
    assert convert(1, "t", "lb") == pytest.approx(2204.6226, rel=1e-6)


def test_same_unit_is_identity():
    assert convert(3, "m", "metre") == 3.0


def test_celsius_kelvin():
    assert convert(0, "C", "K") == pytest.approx(273.15)
    assert convert(0, "K", "C") == pytest.approx(-273.15)


def test_fahrenheit_to_celsius():
    assert convert(212, "F", "C") == pytest.approx(100)
    assert convert(32, "F", "C") == pytest.approx(0, abs=1e-9)
    assert convert(-40, "F", "C") == pytest.approx(-40)


def test_temperature_roundtrip_via_kelvin():
    k = convert(98.6, "F", "K")
    assert k == pytest.approx(310.15)


def test_incompatible():
    with pytest.raises(IncompatibleUnitsError):
        convert(1, "kg", "m")


def test_unknown_unit():
    with pytest.raises(UnknownUnitError):
        convert(1, "furlong", "m")


def test_lookup_aliases_and_case():
    assert lookup("Meters").symbol == "m"
    assert lookup("°C").symbol == "C"
    assert lookup(" kg ").symbol == "kg"
    with pytest.raises(UnknownUnitError):
        lookup("MM")


def test_parse_quantities():
    q = parse("5 km")
    assert q.value == 5 and q.unit.symbol == "km"
    assert parse("1.5e3mm").to("m").value == pytest.approx(1.5)
    assert parse(".5 ft").value == 0.5
    assert parse("6 feet").unit.symbol == "ft"


def test_parse_rejects_garbage():
    with pytest.raises(ValueError):
        parse("km 5")
    with pytest.raises(ValueError):
        parse("5")


def test_quantity_to_and_str():
    assert str(parse("2 m").to("cm")) == "200 cm"


def test_quantity_add_converts():
    total = parse("1 m") + parse("50 cm")
    assert total.unit.symbol == "m" and total.value == pytest.approx(1.5)


def test_cannot_add_offset_temperatures():
    with pytest.raises(IncompatibleUnitsError):
        parse("20 C") + parse("5 C")
