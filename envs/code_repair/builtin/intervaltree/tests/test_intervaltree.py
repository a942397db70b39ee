import random

import pytest

from intervaltree import Interval, IntervalTree


def brute(intervals, start, end):
    return sorted((iv for iv in intervals if iv[0] < end and start < iv[1]), key=lambda iv: (iv[0], iv[1], repr(iv[2])))


def test_empty_tree():
    t = IntervalTree()
    assert len(t) == 0 and not t
    assert t.overlap(0, 10) == []
    assert t.span() is None


def test_add_and_iterate_sorted():
    t = IntervalTree([(5, 8), (1, 3), (2, 9)])
    assert [tuple(iv[:2]) for iv in t] == [(1, 3), (2, 9), (5, 8)]
    assert len(t) == 3


def test_rejects_empty_interval():
    with pytest.raises(ValueError):
        IntervalTree().add(3, 3)


def test_basic_overlap():
    t = IntervalTree([(1, 5, "a"), (6, 10, "b"), (4, 7, "c")])
    assert [iv.data for iv in t.overlap(5, 6)] == ["c"]
    assert [iv.data for iv in t.overlap(0, 2)] == ["a"]


def test_point_query():
    t = IntervalTree([(0, 10, "x"), (5, 6, "y")])
    assert [iv.data for iv in t.at(5)] == ["x", "y"]
    assert [iv.data for iv in t.at(6)] == ["x"]
    assert t.at(10) == []


def test_envelop():
    t = IntervalTree([(1, 4), (2, 3), (0, 10)])
    assert [tuple(iv[:2]) for iv in t.envelop(1, 4)] == [(1, 4), (2, 3)]


def test_remove_leaf_and_missing():
    t = IntervalTree([(1, 2), (3, 4)])
    t.remove(3, 4)
    assert list(t) == [Interval(1, 2)]
    with pytest.raises(KeyError):
        t.remove(3, 4)
    assert t.discard(1, 2) is True
    assert t.discard(1, 2) is False
    assert len(t) == 0


def test_remove_node_with_two_children():
    t = IntervalTree([(5, 6), (2, 3), (8, 9), (7, 8), (9, 10)])
    t.remove(5, 6)
    assert [iv.start for iv in t] == [2, 7, 8, 9]
    assert t.overlap(5, 6) == []


def test_remove_updates_span():
    t = IntervalTree([(1, 2), (0, 100), (3, 4)])
    t.remove(0, 100)
    assert t.span() == (1, 4)


def test_duplicates_with_different_data():
    t = IntervalTree([(1, 3, "a"), (1, 3, "b")])
    assert len(t.overlap(2, 3)) == 2
    t.remove(1, 3, "a")
    assert [iv.data for iv in t] == ["b"]


def test_contains():
    t = IntervalTree([(1, 3, "a")])
    assert (1, 3, "a") in t
    assert (1, 3, "b") not in t


def test_merged():
    t = IntervalTree([(1, 3), (2, 5), (7, 8), (8, 9), (11, 12)])
    assert t.merged() == [(1, 5), (7, 9), (11, 12)]


def test_against_brute_force():
    rng = random.Random(1234)
    t = IntervalTree()
    ivs = []
    for i in range(300):
        s = rng.randint(0, 500)
        iv = (s, s + rng.randint(1, 60), i)
        ivs.append(iv)
        t.add(*iv)
    for iv in ivs[::3]:
        t.remove(*iv)
    ivs = [iv for k, iv in enumerate(ivs) if k % 3]
    for _ in range(200):
        s = rng.randint(-10, 560)
        e = s + rng.randint(1, 40)
        assert [tuple(x) for x in t.overlap(s, e)] == brute(ivs, s, e)
