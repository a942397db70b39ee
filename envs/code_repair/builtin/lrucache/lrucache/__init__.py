"""A small least-recently-used cache with hit/miss statistics and a memoizing decorator."""

from .cache import CacheInfo, LRUCache, lru_cached

__all__ = ["CacheInfo", "LRUCache", "lru_cached"]
