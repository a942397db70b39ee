import pytest

from lrucache import LRUCache, lru_cached


def test_put_and_get():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache["b"] = 2
    assert cache.get("a") == 1
    assert cache["b"] == 2
    assert cache.get("zzz", "default") == "default"


def test_missing_key_raises():
    cache = LRUCache(2)
    with pytest.raises(KeyError):
        cache["nope"]


def test_evicts_oldest_insert():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("c", 3)
    assert "a" not in cache
    assert cache.keys() == ["b", "c"]


def test_replace_keeps_size():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("a", 2)
    assert len(cache) == 1
    assert cache.peek("a") == 2


def test_pop_and_delete():
    cache = LRUCache(3)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.pop("a") == 1
    assert cache.pop("a", None) is None
    del cache["b"]
    assert len(cache) == 0
    with pytest.raises(KeyError):
        cache.pop("b")


def test_on_evict_callback():
    seen = []
    cache = LRUCache(1, on_evict=lambda k, v: seen.append((k, v)))
    cache.put("a", 1)
    cache.put("b", 2)
    assert seen == [("a", 1)]


def test_statistics():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.get("a")
    cache.get("b")
    info = cache.info()
    assert (info.hits, info.misses, info.currsize) == (1, 1, 1)
    assert info.hit_rate == 0.5


def test_invalid_maxsize():
    with pytest.raises(ValueError):
        LRUCache(0)


def test_resize_shrinks():
    cache = LRUCache(4)
    for i in range(4):
        cache.put(i, i)
    cache.resize(2)
    assert cache.keys() == [2, 3]


def test_decorator_memoizes():
    calls = []

    @lru_cached(maxsize=8)
    def square(x):
        calls.append(x)
        return x * x

    assert square(3) == 9
    assert square(3) == 9
    assert calls == [3]
    assert square.cache_info().hits == 1
