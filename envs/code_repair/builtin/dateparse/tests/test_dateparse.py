from datetime import date

import pytest

from dateparse import DateParseError, add_months, days_in_month, is_leap_year, parse_date

REF = date(2024, 3, 13)  # a Wednesday


def test_iso():
    assert parse_date("2024-03-05", REF) == date(2024, 3, 5)
    assert parse_date(" 2023-1-9 ", REF) == date(2023, 1, 9)


def test_slash_month_first_by_default():
    assert parse_date("03/05/2024", REF) == date(2024, 3, 5)
    assert parse_date("03/05/2024", REF, day_first=True) == date(2024, 5, 3)


def test_month_names():
    assert parse_date("5 March 2024", REF) == date(2024, 3, 5)
    assert parse_date("March 5, 2024", REF) == date(2024, 3, 5)
    assert parse_date("Sept 21st 2022", REF) == date(2022, 9, 21)
    assert parse_date("1st Jan 2020", REF) == date(2020, 1, 1)


def test_invalid_day_and_month():
    with pytest.raises(DateParseError, match="day out of range"):
        parse_date("2023-02-29", REF)
    with pytest.raises(DateParseError, match="month out of range"):
        parse_date("2023-13-01", REF)
    with pytest.raises(DateParseError, match="unknown month"):
        parse_date("5 Smarch 2024", REF)


def test_today_yesterday_tomorrow():
    assert parse_date("Today", REF) == REF
    assert parse_date("yesterday", REF) == date(2024, 3, 12)
    assert parse_date("tomorrow", REF) == date(2024, 3, 14)


def test_days_and_weeks_ago():
    assert parse_date("3 days ago", REF) == date(2024, 3, 10)
    assert parse_date("two weeks ago", REF) == date(2024, 2, 28)
    assert parse_date("in 20 days", REF) == date(2024, 4, 2)


def test_months_and_years():
    assert parse_date("1 month ago", date(2024, 3, 31)) == date(2024, 2, 29)
    assert parse_date("in a year", date(2024, 2, 29)) == date(2025, 2, 28)
    assert parse_date("in 10 months", REF) == date(2025, 1, 13)


def test_add_months_crosses_year_backwards():
    assert add_months(date(2024, 1, 15), -1) == date(2023, 12, 15)
    assert add_months(date(2024, 1, 15), -13) == date(2022, 12, 15)


def test_last_weekday():
    assert parse_date("last monday", REF) == date(2024, 3, 11)
    assert parse_date("last wednesday", REF) == date(2024, 3, 6)


def test_next_weekday():
    assert parse_date("next friday", REF) == date(2024, 3, 15)
    assert parse_date("next mon", REF) == date(2024, 3, 18)


def test_this_weekday():
    assert parse_date("this monday", REF) == date(2024, 3, 11)
    assert parse_date("this sunday", REF) == date(2024, 3, 17)


def test_leap_years():
    assert is_leap_year(2024) and not is_leap_year(2023) and not is_leap_year(1900)
    assert days_in_month(2023, 2) == 28
    assert days_in_month(2024, 4) == 30


def test_errors():
    for bad in ["", "someday", "3 fortnights ago", "lots days ago", "next funday"]:
        with pytest.raises(DateParseError):
            parse_date(bad, REF)


def test_reference_must_be_a_date():
    with pytest.raises(TypeError):
        parse_date("today", "2024-01-01")
