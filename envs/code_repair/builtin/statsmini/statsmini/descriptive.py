"""Descriptive statistics over sequences of real numbers."""

from __future__ import annotations

import math
from collections import Counter
from typing import Hashable, Iterable, Sequence


class StatisticsError(ValueError):
    pass


def _data(values: Iterable[float], at_least: int = 1, what: str = "statistic") -> list[float]:
    data = list(values)
    if len(data) < at_least:
        raise StatisticsError(f"{what} requires at least {at_least} data point{'s' if at_least > 1 else ''}")
    for x in data:
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise TypeError(f"not a number: {x!r}")
        if isinstance(x, float) and math.isnan(x):
            raise StatisticsError("NaN in data")
    return data


def mean(values: Iterable[float]) -> float:
    data = _data(values, what="mean")
    return math.fsum(data) / len(data)


def median(values: Iterable[float]) -> float:
    s = sorted(_data(values, what="median"))
    n = len(s)
    mid = n // 2
    if n % 2:
        return s[mid]
    return (s[mid - 1] + s[mid]) / 2


def multimode(values: Iterable[Hashable]) -> list[Hashable]:
    """All most-common values, in order of first appearance."""
    counts = Counter(values)
    if not counts:
        return []
    top = max(counts.values())
    return [v for v, c in counts.items() if c == top]


def mode(values: Iterable[Hashable]) -> Hashable:
    """The most common value; ties go to the value seen first."""
    modes = multimode(values)
    if not modes:
        raise StatisticsError("mode requires at least 1 data point")
    return modes[0]


def variance(values: Iterable[float], sample: bool = True) -> float:
    """Sample variance (divides by n - 1) by default, population variance with ``sample=False``."""
    data = _data(values, at_least=2 if sample else 1, what="variance")
    m = math.fsum(data) / len(data)
    ss = math.fsum((x - m) ** 2 for x in data)
    return ss / (len(data) - 1 if sample else len(data))


def stdev(values: Iterable[float], sample: bool = True) -> float:
    return math.sqrt(variance(values, sample))


def percentile(values: Iterable[float], p: float) -> float:
    """The p-th percentile (0..100) with linear interpolation between closest ranks.

    Matches numpy's default: the rank of p is p/100 * (n - 1) in the sorted data.
    """
    if not 0 <= p <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {p}")
    s = sorted(_data(values, what="percentile"))
    rank = p / 100 * (len(s) - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, len(s) - 1)
    frac = rank - lo
    return s[lo] + (s[hi] - s[lo]) * frac


def quantiles(values: Iterable[float], n: int = 4) -> list[float]:
    """The n - 1 cut points dividing the data into n equal groups (quartiles by default)."""
    if n < 2:
        raise ValueError("n must be at least 2")
    data = _data(values, what="quantiles")
    return [percentile(data, 100 * i / n) for i in range(1, n)]


def histogram(
    values: Iterable[float], bins: int = 10, range_: tuple[float, float] | None = None
) -> tuple[list[int], list[float]]:
    """Counts in ``bins`` equal-width bins and the ``bins + 1`` edges.

    Every bin is half-open [lo, hi) except the last, which also includes its upper edge. Values outside
    ``range_`` are ignored.
    """
    if bins < 1:
        raise ValueError("bins must be >= 1")
    data = _data(values, what="histogram")
    lo, hi = range_ if range_ is not None else (min(data), max(data))
    if lo > hi:
        raise ValueError("range lower bound exceeds upper bound")
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    width = (hi - lo) / bins
    edges = [lo + i * width for i in range(bins)] + [hi]
    counts = [0] * bins
    for x in data:
        if x < lo or x > hi:
            continue
        idx = int((x - lo) / width)
        if idx == bins:
            idx -= 1
        counts[idx] += 1
    return counts, edges


def summary(values: Iterable[float]) -> dict[str, float]:
    data = _data(values, what="summary")
    return {
        "n": len(data),
        "mean": mean(data),
        "stdev": stdev(data) if len(data) > 1 else 0.0,
        "min": min(data),
        "q1": percentile(data, 25),
        "median": median(data),
        "q3": percentile(data, 75),
        "max": max(data),
    }
