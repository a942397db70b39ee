"""LRUCache: a bounded mapping that evicts the least recently used entry first."""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Any

_MISSING = object()


@dataclass(frozen=True)
class CacheInfo:
    """Statistics of a cache, like ``functools.lru_cache``'s ``cache_info()``."""

    hits: int
    misses: int
    maxsize: int
    currsize: int
    evictions: int

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class LRUCache:
    """A mapping of at most ``maxsize`` entries; adding one more evicts the least recently used entry.

    Reading an entry (``get``, ``[]``) or writing it (``put``, ``[]=``) makes it the most recently used.
    ``on_evict(key, value)`` is called for every evicted entry.
    """

    def __init__(self, maxsize: int = 128, on_evict: Callable[[Hashable, Any], None] | None = None) -> None:
        if not isinstance(maxsize, int) or maxsize < 1:
            raise ValueError(f"maxsize must be a positive integer, got {maxsize!r}")
        self.maxsize = maxsize
        self.on_evict = on_evict
        self._data: OrderedDict[Hashable, Any] = OrderedDict()
        self._hits = 0
        self._misses = 0
        self._evictions = 0

    # ------------------------------------------------------------------ reading

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The value of ``key`` (now the most recently used entry), or ``default``."""
        value = self._data.get(key, _MISSING)
        if value is _MISSING:
            self._misses += 1
            return default
        self._hits += 1
        self._data.move_to_end(key)
        return value

    def peek(self, key: Hashable, default: Any = None) -> Any:
        """The value of ``key`` without touching its recency or the statistics."""
        return self._data.get(key, default)

    def __getitem__(self, key: Hashable) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self) -> Iterator[Hashable]:
        """Keys from the least to the most recently used."""
        return iter(list(self._data))

    def keys(self) -> list[Hashable]:
        return list(self._data)

    def items(self) -> list[tuple[Hashable, Any]]:
        return list(self._data.items())

    # ------------------------------------------------------------------ writing

    def put(self, key: Hashable, value: Any) -> None:
        """Insert or replace ``key``; evicts the least recently used entries beyond ``maxsize``."""
        if key in self._data:
            self._data.move_to_end(key)
        self._data[key] = value
        while len(self._data) > self.maxsize:
            self._evict_one()

    def __setitem__(self, key: Hashable, value: Any) -> None:
        self.put(key, value)

    def pop(self, key: Hashable, default: Any = _MISSING) -> Any:
        """Remove ``key`` and return its value (``default`` when absent; KeyError without one)."""
        if key in self._data:
            return self._data.pop(key)
        if default is _MISSING:
            raise KeyError(key)
        return default

    def __delitem__(self, key: Hashable) -> None:
        self.pop(key)

    def clear(self) -> None:
        """Drop every entry (no eviction callbacks) and reset the statistics."""
        self._data.clear()
        self._hits = self._misses = self._evictions = 0

    def resize(self, maxsize: int) -> None:
        """Change the capacity; shrinking evicts least recently used entries."""
        if not isinstance(maxsize, int) or maxsize < 1:
            raise ValueError(f"maxsize must be a positive integer, got {maxsize!r}")
        self.maxsize = maxsize
        while len(self._data) > self.maxsize:
            self._evict_one()

    def _evict_one(self) -> None:
        key, value = self._data.popitem(last=False)
        self._evictions += 1
        if self.on_evict is not None:
            self.on_evict(key, value)

    # ------------------------------------------------------------------ statistics

    def info(self) -> CacheInfo:
        return CacheInfo(self._hits, self._misses, self.maxsize, len(self._data), self._evictions)

    def __repr__(self) -> str:
        return f"LRUCache(maxsize={self.maxsize}, currsize={len(self._data)})"


def _make_key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Hashable:
    if not kwargs:
        return args
    return (*args, _MISSING, *sorted(kwargs.items()))


def lru_cached(maxsize: int = 128) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Memoize a function in an :class:`LRUCache`; the wrapper has ``cache`` and ``cache_info()``."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        cache = LRUCache(maxsize)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            key = _make_key(args, kwargs)
            value = cache.get(key, _MISSING)
            if value is _MISSING:
                value = fn(*args, **kwargs)
                cache.put(key, value)
            return value

        wrapper.cache = cache  # type: ignore[attr-defined]
        wrapper.cache_info = cache.info  # type: ignore[attr-defined]
        wrapper.cache_clear = cache.clear  # type: ignore[attr-defined]
        return wrapper

    return decorate
