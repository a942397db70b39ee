from __future__ import annotations

from typing import Any, Iterable, Iterator


class BufferEmpty(IndexError):
    pass


class BufferFull(OverflowError):
    pass


class RingBuffer:
    """A fixed-capacity FIFO. When full, append() overwrites the oldest item (or raises BufferFull when
    created with overwrite=False). Indexing is oldest-first: rb[0] is the oldest item, rb[-1] the newest."""

    __slots__ = ("_data", "_start", "_size", "capacity", "overwrite")

    def __init__(self, capacity: int, items: Iterable = (), *, overwrite: bool = True):
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError("capacity must be a positive integer")
        self.capacity = capacity
        self.overwrite = overwrite
        self._data: list[Any] = [None] * capacity
        self._start = 0
        self._size = 0
        self.extend(items)

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    @property
    def full(self) -> bool:
        return self._size == self.capacity

    def append(self, item: Any) -> Any:
        """Add *item* as the newest element; returns the overwritten oldest element, if any (else None)."""
        if self.full:
            if not self.overwrite:
                raise BufferFull(f"ring buffer of capacity {self.capacity} is full")
            evicted = self._data[self._start]
            self._data[self._start] = item
            self._start = (self._start + 1) % self.capacity
            return evicted
        self._data[(self._start + self._size) % self.capacity] = item
        self._size += 1
        return None

    def extend(self, items: Iterable) -> None:
        for item in items:
            self.append(item)

    def popleft(self) -> Any:
        """Remove and return the oldest item."""
        if not self._size:
            raise BufferEmpty("pop from an empty ring buffer")
        item = self._data[self._start]
        self._data[self._start] = None
        self._start = (self._start + 1) % self.capacity
        self._size -= 1
        return item

    def pop(self) -> Any:
        """Remove and return the newest item."""
        if not self._size:
            raise BufferEmpty("pop from an empty ring buffer")
        idx = (self._start + self._size - 1) % self.capacity
        item = self._data[idx]
        self._data[idx] = None
        self._size -= 1
        return item

    def peek(self) -> Any:
        """The oldest item, without removing it."""
        if not self._size:
            raise BufferEmpty("peek into an empty ring buffer")
        return self._data[self._start]

    def _index(self, i: int) -> int:
        if not isinstance(i, int):
            raise TypeError("ring buffer indices must be integers")
        if i < 0:
            i += self._size
        if not 0 <= i < self._size:
            raise IndexError("ring buffer index out of range")
        return (self._start + i) % self.capacity

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._size))]
        return self._data[self._index(i)]

    def __setitem__(self, i: int, value: Any) -> None:
        self._data[self._index(i)] = value

    def __iter__(self) -> Iterator[Any]:
        for j in range(self._size):
            yield self._data[(self._start + j) % self.capacity]

    def __reversed__(self) -> Iterator[Any]:
        for j in range(self._size - 1, -1, -1):
            yield self._data[(self._start + j) % self.capacity]

    def __eq__(self, other) -> bool:
        if isinstance(other, RingBuffer):
            return self.capacity == other.capacity and list(self) == list(other)
        return NotImplemented

    def clear(self) -> None:
        self._data = [None] * self.capacity
        self._start = self._size = 0

    def to_list(self) -> list:
        return list(self)

    def __repr__(self) -> str:
        return f"RingBuffer({self.capacity}, {self.to_list()!r})"
