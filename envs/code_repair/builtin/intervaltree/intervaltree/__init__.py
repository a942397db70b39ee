"""An interval tree over half-open intervals [start, end)."""
from .tree import Interval, IntervalTree

__all__ = ["Interval", "IntervalTree"]
