from __future__ import annotations

import math
from typing import Optional

from .buffer import RingBuffer


class MovingAverage:
    """Simple moving average over the last *window* values, O(1) per update."""

    def __init__(self, window: int):
        self._buf = RingBuffer(window)
        self._sum = 0.0
        self.count = 0  # values seen in total

    @property
    def window(self) -> int:
        return self._buf.capacity

    def add(self, value: float) -> float:
        """Record *value* and return the average of the last *window* values."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            raise ValueError(f"not a number: {value!r}")
        evicted = self._buf.append(value)
        if evicted is not None:
            self._sum -= evicted
        self._sum += value
        self.count += 1
        return self.value

    @property
    def value(self) -> Optional[float]:
        if not self._buf:
            return None
        return self._sum / len(self._buf)

    @property
    def ready(self) -> bool:
        """True once a full window of values has been seen."""
        return self._buf.full

    def values(self) -> list:
        return self._buf.to_list()

    def reset(self) -> None:
        self._buf.clear()
        self._sum = 0.0
        self.count = 0
