"""Rate limiters (token bucket, sliding-window log, sliding-window counter) driven by an injected clock."""

from .clock import Clock, ManualClock
from .limiters import KeyedLimiter, SlidingWindowCounter, SlidingWindowLog, TokenBucket

__all__ = ["Clock", "KeyedLimiter", "ManualClock", "SlidingWindowCounter", "SlidingWindowLog", "TokenBucket"]
