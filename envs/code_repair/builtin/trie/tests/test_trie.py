import pytest

from trie import Trie


def test_insert_and_contains():
    t = Trie(["car", "cart", "cat"])
    assert "car" in t and "cart" in t and "cat" in t
    assert "ca" not in t and "carts" not in t
    assert len(t) == 3


def test_prefix_search_sorted():
    t = Trie(["banana", "band", "ban", "apple", "bandana"])
    assert t.starts_with("ban") == ["ban", "banana", "band", "bandana"]
    assert t.starts_with("x") == []
    assert t.starts_with("") == ["apple", "ban", "banana", "band", "bandana"]


def test_iteration_is_sorted():
    assert list(Trie(["b", "a", "ab"])) == ["a", "ab", "b"]


def test_has_prefix():
    t = Trie(["hello"])
    assert t.has_prefix("hel") and t.has_prefix("hello")
    assert not t.has_prefix("help")


def test_weights_accumulate():
    t = Trie()
    t.insert("go", 3)
    t.insert("go", 2)
    assert t.weight("go") == 5
    with pytest.raises(KeyError):
        t.weight("g")


def test_bad_insert():
    with pytest.raises(TypeError):
        Trie().insert(5)
    with pytest.raises(ValueError):
        Trie().insert("a", -1)


def test_delete_leaf_prunes_nodes():
    t = Trie(["cat", "cart"])
    assert t.delete("cart")
    assert "cart" not in t
    assert not t.has_prefix("car")
    assert t.starts_with("ca") == ["cat"]
    assert len(t) == 1


def test_delete_missing():
    t = Trie(["cat"])
    assert not t.delete("ca")
    assert not t.delete("dog")
    assert not t.delete("cats")
    assert len(t) == 1


def test_delete_then_reinsert_resets_weight():
    t = Trie()
    t.insert("x", 10)
    t.delete("x")
    t.insert("x", 1)
    assert t.weight("x") == 1


def test_complete_ranked_by_weight():
    t = Trie()
    for word, w in [("python", 50), ("pytest", 30), ("pyramid", 5), ("pycharm", 30), ("java", 99)]:
        t.insert(word, w)
    assert t.complete("py", 3) == ["python", "pycharm", "pytest"]
    assert t.complete("py", 0) == []
    assert t.complete("z") == []


def test_complete_limit_larger_than_matches():
    t = Trie(["ab", "ac"])
    assert t.complete("a", 10) == ["ab", "ac"]


def test_empty_string_word():
    t = Trie([""])
    assert "" in t and len(t) == 1
    assert t.delete("")
    assert len(t) == 0


def test_longest_prefix_of():
    t = Trie(["a", "ab", "abcd"])
    assert t.longest_prefix_of("abcz") == "ab"
    assert t.longest_prefix_of("zzz") is None
    assert t.longest_prefix_of("abcde") == "abcd"
