from __future__ import annotations

import re
from datetime import date, timedelta

MONTHS = {
    name: i
    for i, names in enumerate(
        [("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"), ("may",),
         ("june", "jun"), ("july", "jul"), ("august", "aug"), ("september", "sep", "sept"),
         ("october", "oct"), ("november", "nov"), ("december", "dec")],
        start=1,
    )
    for name in names
}

WEEKDAYS = {
    name: i
    for i, names in enumerate(
        [("monday", "mon"), ("tuesday", "tue", "tues"), ("wednesday", "wed"), ("thursday", "thu", "thurs"),
         ("friday", "fri"), ("saturday", "sat"), ("sunday", "sun")]
    )
    for name in names
}

NUMBER_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
                "seven": 7, "eight": 8, "nine": 9, "ten": 10}

UNITS = {"day": "days", "days": "days", "week": "weeks", "weeks": "weeks", "month": "months",
         "months": "months", "year": "years", "years": "years"}


class DateParseError(ValueError):
    pass


def is_leap_year(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year: int, month: int) -> int:
    if month == 2:
        return 29 if is_leap_year(year) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _make(year: int, month: int, day: int, text: str) -> date:
    if not 1 <= month <= 12:
        raise DateParseError(f"month out of range in {text!r}")
    if not 1 <= day <= days_in_month(year, month):
        raise DateParseError(f"day out of range in {text!r}")
    return date(year, month, day)


def add_months(d: date, months: int) -> date:
    """Shift by whole months, clamping the day to the end of the target month (Jan 31 + 1 month = Feb 28/29)."""
    index = d.year * 12 + (d.month - 1) + months
    year, month = divmod(index, 12)
    month += 1
    return date(year, month, min(d.day, days_in_month(year, month)))


def _shift(ref: date, amount: int, unit: str) -> date:
    if unit == "days":
        return ref + timedelta(days=amount)
    if unit == "weeks":
        return ref + timedelta(weeks=amount)
    if unit == "months":
        return add_months(ref, amount)
    return add_months(ref, 12 * amount)


def _amount(token: str, text: str) -> int:
    if token.isdigit():
        return int(token)
    if token in NUMBER_WORDS:
        return NUMBER_WORDS[token]
    raise DateParseError(f"bad amount {token!r} in {text!r}")


_ISO = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})")
_SLASH = re.compile(r"(\d{1,2})/(\d{1,2})/(\d{4})")
_DAY_MONTH = re.compile(r"(\d{1,2})(?:st|nd|rd|th)?\s+([a-z]+)\.?,?\s+(\d{4})")
_MONTH_DAY = re.compile(r"([a-z]+)\.?\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})")
_AGO = re.compile(r"(\w+)\s+(\w+)\s+ago")
_IN = re.compile(r"in\s+(\w+)\s+(\w+)")
_WEEKDAY = re.compile(r"(next|last|this)\s+([a-z]+)")


def parse_date(text: str, today: date, *, day_first: bool = False) -> date:
    """Parse *text* into a date. Relative expressions are resolved against *today*.

    Accepted: ``2024-03-05``, ``03/05/2024`` (month first unless ``day_first``), ``5 March 2024``,
    ``March 5, 2024``, ``today``/``yesterday``/``tomorrow``, ``3 days ago``, ``in 2 weeks``,
    ``next friday``, ``last monday``, ``this sunday``.
    """
    if not isinstance(today, date):
        raise TypeError("today must be a datetime.date")
    s = " ".join(text.strip().lower().split())
    if not s:
        raise DateParseError("empty date string")

    if s == "today":
        return today
    if s == "yesterday":
        return today - timedelta(days=1)
    if s == "tomorrow":
        return today + timedelta(days=1)

    if m := _ISO.fullmatch(s):
        y, mo, d = map(int, m.groups())
        return _make(y, mo, d, text)
    if m := _SLASH.fullmatch(s):
        a, b, y = map(int, m.groups())
        mo, d = (b, a) if day_first else (a, b)
        return _make(y, mo, d, text)
    if m := _DAY_MONTH.fullmatch(s):
        d, name, y = m.groups()
        if name not in MONTHS:
            raise DateParseError(f"unknown month {name!r} in {text!r}")
        return _make(int(y), MONTHS[name], int(d), text)
    if m := _MONTH_DAY.fullmatch(s):
        name, d, y = m.groups()
        if name not in MONTHS:
            raise DateParseError(f"unknown month {name!r} in {text!r}")
        return _make(int(y), MONTHS[name], int(d), text)
    if m := _AGO.fullmatch(s):
        amount, unit = m.groups()
        if unit not in UNITS:
            raise DateParseError(f"unknown unit {unit!r} in {text!r}")
        return _shift(today, -_amount(amount, text), UNITS[unit])
    if m := _IN.fullmatch(s):
        amount, unit = m.groups()
        if unit not in UNITS:
            raise DateParseError(f"unknown unit {unit!r} in {text!r}")
        return _shift(today, _amount(amount, text), UNITS[unit])
    if m := _WEEKDAY.fullmatch(s):
        which, name = m.groups()
        if name not in WEEKDAYS:
            raise DateParseError(f"unknown weekday {name!r} in {text!r}")
        target = WEEKDAYS[name]
        if which == "next":
            return today + timedelta(days=(target - today.weekday()) % 7 or 7)
        if which == "last":
            return today - timedelta(days=(today.weekday() - target) % 7 or 7)
        # "this X": the X of the current Monday-based week
        return today + timedelta(days=target - today.weekday())
    raise DateParseError(f"unrecognised date {text!r}")
