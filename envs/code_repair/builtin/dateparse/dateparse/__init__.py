"""Parse absolute and relative dates against an explicit reference date (never the system clock)."""
from .parser import DateParseError, add_months, days_in_month, is_leap_year, parse_date

__all__ = ["DateParseError", "add_months", "days_in_month", "is_leap_year", "parse_date"]
