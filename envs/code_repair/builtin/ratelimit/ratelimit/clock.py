"""Clocks. Limiters never read the system time themselves: the caller passes a clock (any callable
returning monotonically non-decreasing seconds as a float), e.g. ``time.monotonic`` in production or a
``ManualClock`` in tests."""

from __future__ import annotations

from typing import Callable

Clock = Callable[[], float]


class ManualClock:
    """A clock that only moves when told to."""

    def __init__(self, start: float = 0.0):
        self._now = float(start)

    def __call__(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time cannot go backwards")
        self._now += seconds

    def set(self, now: float) -> None:
        if now < self._now:
            raise ValueError("time cannot go backwards")
        self._now = float(now)
