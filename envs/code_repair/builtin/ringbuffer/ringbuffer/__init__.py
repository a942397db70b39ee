"""A fixed-size ring buffer and a moving-average helper built on it."""
from .buffer import BufferEmpty, BufferFull, RingBuffer
from .average import MovingAverage

__all__ = ["BufferEmpty", "BufferFull", "RingBuffer", "MovingAverage"]
