"""Rate limiter implementations."""

from __future__ import annotations

import math
from collections import deque
from typing import Callable, Hashable

from .clock import Clock


class TokenBucket:
    """Holds up to ``capacity`` tokens, refilled continuously at ``rate`` tokens per second.

    The bucket starts full. ``allow(cost)`` takes ``cost`` tokens if available.
    """

    def __init__(self, rate: float, capacity: float, clock: Clock):
        if rate <= 0 or capacity <= 0:
            raise ValueError("rate and capacity must be positive")
        self.rate = float(rate)
        self.capacity = float(capacity)
        self._clock = clock
        self._tokens = float(capacity)
        self._last = clock()

    def _refill(self) -> None:
        now = self._clock()
        elapsed = now - self._last
        if elapsed > 0:
            self._tokens = min(self.capacity, self._tokens + elapsed * self.rate)
            self._last = now

    @property
    def tokens(self) -> float:
        self._refill()
        return self._tokens

    def allow(self, cost: float = 1) -> bool:
        if cost > self.capacity:
            raise ValueError(f"cost {cost} exceeds capacity {self.capacity}")
        self._refill()
        if self._tokens >= cost:
            self._tokens -= cost
            return True
        return False

    def retry_after(self, cost: float = 1) -> float:
        """Seconds until ``allow(cost)`` would succeed (0 if it would succeed now)."""
        self._refill()
        missing = cost - self._tokens
        return 0.0 if missing <= 0 else missing / self.rate


class SlidingWindowLog:
    """Allows at most ``limit`` events in any window of ``window`` seconds (exact, keeps timestamps).

    An event at time t stops counting at exactly t + window.
    """

    def __init__(self, limit: int, window: float, clock: Clock):
        if limit < 1 or window <= 0:
            raise ValueError("limit must be >= 1 and window > 0")
        self.limit = limit
        self.window = float(window)
        self._clock = clock
        self._events: deque[float] = deque()

    def _evict(self, now: float) -> None:
        cutoff = now - self.window
        while self._events and self._events[0] <= cutoff:
            self._events.popleft()

    def allow(self) -> bool:
        now = self._clock()
        self._evict(now)
        if len(self._events) < self.limit:
            self._events.append(now)
            return True
        return False

    def remaining(self) -> int:
        self._evict(self._clock())
        return self.limit - len(self._events)

    def retry_after(self) -> float:
        now = self._clock()
        self._evict(now)
        if len(self._events) < self.limit:
            return 0.0
        return self._events[0] + self.window - now


class SlidingWindowCounter:
    """Approximates a sliding window with two fixed windows, weighting the previous one by overlap."""

    def __init__(self, limit: int, window: float, clock: Clock):
        if limit < 1 or window <= 0:
            raise ValueError("limit must be >= 1 and window > 0")
        self.limit = limit
        self.window = float(window)
        self._clock = clock
        self._current_start = math.floor(clock() / self.window) * self.window
        self._current = 0
        self._previous = 0

    def _roll(self, now: float) -> None:
        start = math.floor(now / self.window) * self.window
        if start == self._current_start:
            return
        if start - self._current_start == self.window:
            self._previous = self._current
        else:
            self._previous = 0
        self._current = 0
        self._current_start = start

    def estimate(self) -> float:
        now = self._clock()
        self._roll(now)
        overlap = 1 - (now - self._current_start) / self.window
        return self._previous * overlap + self._current

    def allow(self) -> bool:
        if self.estimate() + 1 <= self.limit:
            self._current += 1
            return True
        return False


class KeyedLimiter:
    """One limiter per key (user, IP, ...), created on first use by ``factory``."""

    def __init__(self, factory: Callable[[], object]):
        self._factory = factory
        self._limiters: dict[Hashable, object] = {}

    def get(self, key: Hashable):
        if key not in self._limiters:
            self._limiters[key] = self._factory()
        return self._limiters[key]

    def allow(self, key: Hashable) -> bool:
        return self.get(key).allow()

    def __len__(self) -> int:
        return len(self._limiters)
