import math

import pytest

from statsmini import (
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


def test_mean():
    assert mean([1, 2, 3, 4]) == 2.5
    assert mean([0.1] * 10) == pytest.approx(0.1)
    with pytest.raises(StatisticsError):
        mean([])


def test_rejects_non_numbers_and_nan():
    with pytest.raises(TypeError):
        mean([1, "2"])
    with pytest.raises(TypeError):
        mean([True, 1])
    with pytest.raises(StatisticsError):
        mean([1.0, math.nan])


def test_median_odd_even_unsorted():
    assert median([3, 1, 2]) == 2
    assert median([4, 1, 3, 2]) == 2.5
    assert median([7]) == 7


def test_mode_and_multimode():
    assert mode([1, 2, 2, 3]) == 2
    assert mode(["b", "a", "a", "b"]) == "b"
    assert multimode([1, 1, 2, 2, 3]) == [1, 2]
    assert multimode([]) == []
    with pytest.raises(StatisticsError):
        mode([])


def test_variance_and_stdev():
    data = [2, 4, 4, 4, 5, 5, 7, 9]
    assert variance(data, sample=False) == 4
    assert stdev(data, sample=False) == 2
    assert variance(data) == pytest.approx(32 / 7)
    with pytest.raises(StatisticsError):
        variance([1])
    assert variance([5], sample=False) == 0


def test_percentile_endpoints():
    data = [15, 20, 35, 40, 50]
    assert percentile(data, 0) == 15
    assert percentile(data, 100) == 50
    assert percentile(data, 50) == 35


def test_percentile_bad_p():
    with pytest.raises(ValueError):
        percentile([1, 2], 101)


def test_percentile_single_value():
    assert percentile([42], 90) == 42


def test_histogram_basic():
    counts, edges = histogram([1, 2, 2, 3, 3, 3, 4], bins=3)
    assert edges == [1, 2, 3, 4]
    assert sum(counts) == 7


def test_histogram_range_excludes_outside():
    counts, edges = histogram([-5, 0, 1, 2, 50], bins=2, range_=(0, 4))
    assert edges == [0, 2, 4]
    assert counts == [2, 1]


def test_histogram_constant_data():
    counts, edges = histogram([3, 3, 3], bins=1)
    assert counts == [3] and edges == [2.5, 3.5]


def test_histogram_bad_args():
    with pytest.raises(ValueError):
        histogram([1], bins=0)
    with pytest.raises(ValueError):
        histogram([1], range_=(2, 1))


def test_summary():
    s = summary([1, 2, 3, 4, 5])
    assert s["n"] == 5 and s["median"] == 3 and s["min"] == 1 and s["max"] == 5
    assert s["mean"] == 3


def test_quantiles_bad_n():
    with pytest.raises(ValueError):
        quantiles([1, 2, 3], n=1)
