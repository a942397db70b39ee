import pytest

from ringbuffer import BufferEmpty, BufferFull, MovingAverage, RingBuffer


def test_capacity_validation():
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError):
            RingBuffer(bad)


def test_append_until_full():
    rb = RingBuffer(3)
    assert not rb and len(rb) == 0
    rb.extend([1, 2, 3])
    assert rb.full and rb.to_list() == [1, 2, 3]


def test_overwrite_oldest():
    rb = RingBuffer(3, [1, 2, 3])
    assert rb.append(4) == 1
    assert rb.append(5) == 2
    assert rb.to_list() == [3, 4, 5]
    assert len(rb) == 3


def test_no_overwrite_raises():
    rb = RingBuffer(2, [1, 2], overwrite=False)
    with pytest.raises(BufferFull):
        rb.append(3)
    assert rb.to_list() == [1, 2]


def test_popleft_and_pop():
    rb = RingBuffer(3, [1, 2, 3, 4])
    assert rb.popleft() == 2
    assert rb.pop() == 4
    assert rb.to_list() == [3]
    rb.extend([5, 6])
    assert rb.to_list() == [3, 5, 6]


def test_empty_errors():
    rb = RingBuffer(2)
    for op in (rb.pop, rb.popleft, rb.peek):
        with pytest.raises(BufferEmpty):
            op()
    with pytest.raises(IndexError):
        rb[0]


def test_indexing_after_wraparound():
    rb = RingBuffer(4, range(10))
    assert [rb[i] for i in range(4)] == [6, 7, 8, 9]
    assert rb[-1] == 9 and rb[-4] == 6
    with pytest.raises(IndexError):
        rb[4]
    with pytest.raises(IndexError):
        rb[-5]


def test_slicing_and_setitem():
    rb = RingBuffer(4, range(6))
    assert rb[1:3] == [3, 4]
    assert rb[::-1] == [5, 4, 3, 2]
    rb[0] = "x"
    assert rb.to_list() == ["x", 3, 4, 5]


def test_reversed_and_eq():
    rb = RingBuffer(3, "abcd")
    assert list(reversed(rb)) == ["d", "c", "b"]
    assert rb == RingBuffer(3, "bcd")
    assert rb != RingBuffer(4, "bcd")


def test_clear_and_peek():
    rb = RingBuffer(2, [1, 2, 3])
    assert rb.peek() == 2
    rb.clear()
    assert len(rb) == 0 and rb.to_list() == []
    rb.append(7)
    assert rb.peek() == 7


def test_moving_average_warmup():
    ma = MovingAverage(3)
    assert ma.value is None
    assert ma.add(3) == 3
    assert ma.add(5) == 4
    assert not ma.ready


def test_moving_average_sliding():
    ma = MovingAverage(3)
    results = [ma.add(x) for x in [1, 2, 3, 4, 5, 6]]
    assert results == [1, 1.5, 2, 3, 4, 5]
    assert ma.ready and ma.values() == [4, 5, 6]
    assert ma.count == 6


def test_moving_average_rejects_garbage():
    ma = MovingAverage(2)
    for bad in ("1", None, float("nan"), True):
        with pytest.raises(ValueError):
            ma.add(bad)


def test_moving_average_reset():
    ma = MovingAverage(2)
    ma.add(10)
    ma.reset()
    assert ma.value is None
    assert ma.add(4) == 4
