"""Descriptive statistics: mean, median, mode, variance, percentiles with interpolation, histograms."""

from .descriptive import (
    StatisticsError,
    histogram,
    mean,
    median,
    mode,
    multimode,
    percentile,
    quantiles,
    stdev,
    summary,
    variance,
)

__all__ = [
    "StatisticsError",
    "histogram",
    "mean",
    "median",
    "mode",
    "multimode",
    "percentile",
    "quantiles",
    "stdev",
    "summary",
    "variance",
]
