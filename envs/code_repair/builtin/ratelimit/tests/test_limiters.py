import pytest

from ratelimit import KeyedLimiter, ManualClock, SlidingWindowCounter, SlidingWindowLog, TokenBucket


def test_manual_clock():
    c = ManualClock(5)
    c.advance(1.5)
    assert c() == 6.5
    with pytest.raises(ValueError):
        c.advance(-1)
    with pytest.raises(ValueError):
        c.set(1)


def test_bucket_starts_full_and_drains():
    clock = ManualClock()
    b = TokenBucket(rate=1, capacity=3, clock=clock)
    assert [b.allow() for _ in range(4)] == [True, True, True, False]


def test_bucket_refills_over_time():
    clock = ManualClock()
    b = TokenBucket(rate=2, capacity=2, clock=clock)
    assert b.allow(2)
    assert not b.allow()
    clock.advance(0.5)
    assert b.allow()
    assert not b.allow()


def test_bucket_cost_and_retry_after():
    clock = ManualClock()
    b = TokenBucket(rate=4, capacity=10, clock=clock)
    assert b.allow(8)
    assert b.retry_after(2) == 0
    assert b.retry_after(6) == pytest.approx(1.0)
    assert not b.allow(6)
    clock.advance(1.0)
    assert b.allow(6)


def test_bucket_rejects_impossible_cost():
    b = TokenBucket(rate=1, capacity=2, clock=ManualClock())
    with pytest.raises(ValueError):
        b.allow(3)


def test_bucket_bad_args():
    with pytest.raises(ValueError):
        TokenBucket(rate=0, capacity=1, clock=ManualClock())


def test_log_limits_within_window():
    clock = ManualClock()
    w = SlidingWindowLog(limit=2, window=10, clock=clock)
    assert w.allow() and w.allow()
    assert not w.allow()
    assert w.remaining() == 0
    clock.advance(5)
    assert not w.allow()


def test_log_slides():
    clock = ManualClock()
    w = SlidingWindowLog(limit=2, window=10, clock=clock)
    w.allow()
    clock.advance(4)
    w.allow()
    clock.advance(7)  # t=11: first event expired, second still counts
    assert w.remaining() == 1
    assert w.allow()
    assert not w.allow()


def test_log_retry_after():
    clock = ManualClock(100)
    w = SlidingWindowLog(limit=1, window=30, clock=clock)
    assert w.retry_after() == 0
    w.allow()
    clock.advance(12)
    assert w.retry_after() == pytest.approx(18)


def test_rejected_requests_do_not_count():
    clock = ManualClock()
    w = SlidingWindowLog(limit=1, window=10, clock=clock)
    w.allow()
    for _ in range(5):
        clock.advance(1)
        assert not w.allow()
    clock.advance(6)
    assert w.allow()


def test_counter_weights_previous_window():
    clock = ManualClock()
    c = SlidingWindowCounter(limit=10, window=60, clock=clock)
    for _ in range(10):
        assert c.allow()
    assert not c.allow()
    clock.set(90)  # half-way through the next window: 10 * 0.5 = 5 counted
    assert c.estimate() == pytest.approx(5)
    assert sum(c.allow() for _ in range(10)) == 5


def test_counter_forgets_after_two_windows():
    clock = ManualClock()
    c = SlidingWindowCounter(limit=3, window=10, clock=clock)
    for _ in range(3):
        c.allow()
    clock.set(25)
    assert c.estimate() == 0


def test_keyed_limiter_isolates_keys():
    clock = ManualClock()
    k = KeyedLimiter(lambda: TokenBucket(rate=1, capacity=1, clock=clock))
    assert k.allow("alice")
    assert not k.allow("alice")
    assert k.allow("bob")
    assert len(k) == 2
    assert k.get("alice") is k.get("alice")
