import pytest

from jsonpath_lite import JSONPathError, compile, find, first

DOC = {
    "store": {
        "book": [
            {"title": "Sayings", "price": 8.95, "tags": ["old", "wise"]},
            {"title": "Sword", "price": 12.99, "tags": []},
            {"title": "Moby Dick", "price": 8.99, "tags": ["sea"]},
            {"title": "Lord", "price": 22.99, "tags": ["epic", "long", "ring"]},
        ],
        "bicycle": {"color": "red", "price": 19.95},
    },
    "odd key": 1,
}


def test_root():
    assert find("$", DOC) == [DOC]


def test_dotted_keys():
    assert find("$.store.bicycle.color", DOC) == ["red"]


def test_missing_key_gives_empty():
    assert find("$.store.car", DOC) == []
    assert first("$.store.car", DOC, default="none") == "none"


def test_index():
    assert find("$.store.book[1].title", DOC) == ["Sword"]


def test_negative_index():
    assert find("$.store.book[-1].title", DOC) == ["Lord"]


def test_index_far_out_of_range():
    assert find("$.store.book[10]", DOC) == []
    assert find("$.store.book[-10]", DOC) == []


def test_wildcard_list():
    assert find("$.store.book[*].price", DOC) == [8.95, 12.99, 8.99, 22.99]


def test_wildcard_dict_dot():
    assert find("$.store.bicycle.*", DOC) == ["red", 19.95]


def test_slice():
    assert find("$.store.book[1:3].title", DOC) == ["Sword", "Moby Dick"]


def test_slice_step():
    assert find("$.store.book[::2].title", DOC) == ["Sayings", "Moby Dick"]


def test_slice_negative_start():
    assert find("$.store.book[-2:].title", DOC) == ["Moby Dick", "Lord"]


def test_quoted_key():
    assert find("$['odd key']", DOC) == [1]
    assert find('$["store"]["bicycle"]["color"]', DOC) == ["red"]


def test_quoted_key_with_bracket():
    assert find("$['a]b']", {"a]b": 5}) == [5]


def test_nested_wildcards_flatten():
    assert find("$.store.book[*].tags[*]", DOC) == ["old", "wise", "sea", "epic", "long", "ring"]


def test_key_on_list_gives_nothing():
    assert find("$.store.book.title", DOC) == []


def test_compiled_path_reusable():
    p = compile("$.a")
    assert p.find({"a": 1}) == [1]
    assert p.first({"b": 1}) is None
    assert repr(p) == "Path('$.a')"


@pytest.mark.parametrize("bad", ["store", "$.", "$.a[", "$.a[]", "$.a[x]", "$.a[::0]", "$.a[1:2:3:4]", "$a"])
def test_malformed(bad):
    with pytest.raises(JSONPathError):
        compile(bad)
