import pytest

from bitset import BitSet


def test_add_contains_len():
    b = BitSet([3, 64, 65, 200])
    assert 3 in b and 64 in b and 200 in b
    assert 4 not in b and 1000 not in b and -1 not in b and "x" not in b
    assert len(b) == 4


def test_iteration_ascending_across_words():
    assert list(BitSet([130, 5, 63, 64, 0])) == [0, 5, 63, 64, 130]


def test_duplicates_ignored():
    assert len(BitSet([1, 1, 1])) == 1


def test_bad_members():
    with pytest.raises(ValueError):
        BitSet([-1])
    with pytest.raises(TypeError):
        BitSet([1.5])


def test_discard_and_remove():
    b = BitSet([1, 100])
    b.discard(100)
    b.discard(5000)
    assert list(b) == [1]
    with pytest.raises(KeyError):
        b.remove(100)
    b.remove(1)
    assert not b


def test_equality_ignores_capacity():
    b = BitSet([1, 500])
    b.discard(500)
    assert b == BitSet([1])


def test_max():
    assert BitSet([3, 190]).max() == 190
    with pytest.raises(ValueError):
        BitSet().max()


def test_union_intersection():
    a, b = BitSet([1, 2, 70]), BitSet([2, 3, 300])
    assert list(a | b) == [1, 2, 3, 70, 300]
    assert list(a & b) == [2]
    assert list(b & a) == [2]


def test_difference_same_size():
    assert list(BitSet([1, 2, 3]) - BitSet([2])) == [1, 3]


def test_symmetric_difference():
    assert list(BitSet([1, 2, 100]) ^ BitSet([2, 3])) == [1, 3, 100]


def test_subset():
    assert BitSet([1, 2]).issubset(BitSet([1, 2, 3]))
    assert not BitSet([1, 200]).issubset(BitSet([1, 2]))


def test_copy_is_independent():
    a = BitSet([1])
    c = a.copy()
    c.add(2)
    assert list(a) == [1]


def test_rank():
    b = BitSet([2, 5, 64, 130])
    assert b.rank(0) == 0
    assert b.rank(3) == 1
    assert b.rank(64) == 2
    assert b.rank(65) == 3
    assert b.rank(10_000) == 4


def test_select():
    b = BitSet([2, 5, 64, 130])
    assert [b.select(k) for k in range(4)] == [2, 5, 64, 130]
    with pytest.raises(IndexError):
        b.select(4)
    with pytest.raises(IndexError):
        b.select(-1)


def test_rank_select_inverse():
    b = BitSet(range(0, 500, 7))
    for k in range(len(b)):
        assert b.rank(b.select(k)) == k


def test_repr():
    assert repr(BitSet([9, 1])) == "BitSet([1, 9])"
