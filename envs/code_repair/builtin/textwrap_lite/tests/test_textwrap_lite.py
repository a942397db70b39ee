import pytest

from textwrap_lite import dedent, fill, indent, justify, shorten, wrap

TEXT = "The quick brown fox jumps over the lazy dog"


def test_wrap_basic():
    assert wrap(TEXT, 15) == ["The quick brown", "fox jumps over", "the lazy dog"]


def test_wrap_collapses_whitespace():
    assert wrap("  a   b\n\tc  ", 10) == ["a b c"]


def test_wrap_empty():
    assert wrap("   ", 10) == []
    assert fill("", 10) == ""


def test_wrap_lines_never_exceed_width():
    for width in range(5, 30):
        for line in wrap(TEXT * 3, width):
            assert len(line) <= width


def test_wrap_indents():
    lines = wrap(TEXT, 16, initial_indent="* ", subsequent_indent="  ")
    assert lines == ["* The quick", "  brown fox", "  jumps over the", "  lazy dog"]


def test_long_words_broken():
    assert wrap("abcdefghij xy", 4) == ["abcd", "efgh", "ij", "xy"]


def test_long_words_kept():
    assert wrap("a abcdefghij b", 4, break_long_words=False) == ["a", "abcdefghij", "b"]


def test_invalid_width():
    with pytest.raises(ValueError):
        wrap("x", 0)
    with pytest.raises(ValueError):
        wrap("x", 3, initial_indent="   ")


def test_fill():
    assert fill(TEXT, 20) == "The quick brown fox\njumps over the lazy\ndog"


def test_justify():
    assert justify(TEXT, 16) == [
        "The  quick brown",
        "fox  jumps  over",
        "the lazy dog",
    ]


def test_justify_widths():
    for line in justify(TEXT * 2, 20)[:-1]:
        assert len(line) == 20


def test_shorten():
    assert shorten("Hello  world!", 12) == "Hello world!"
    assert shorten("Hello world, how are you?", 20) == "Hello world, [...]"
    assert shorten("Supercalifragilistic", 10) == "[...]"


def test_indent_skips_blank_lines():
    assert indent("a\n\nb\n", "> ") == "> a\n\n> b\n"
    assert indent("a\n\nb", "# ", predicate=lambda line: True) == "# a\n# \n# b"


def test_dedent():
    src = "    def f():\n        return 1\n\n    x = 2\n"
    assert dedent(src) == "def f():\n    return 1\n\nx = 2\n"


def test_dedent_whitespace_only_lines_become_empty():
    assert dedent("  a\n      \n  b") == "a\n\nb"


def test_dedent_mixed_tabs_and_spaces():
    assert dedent("\t a\n\t  b\n") == "a\n b\n"
    assert dedent(" a\n\tb\n") == " a\n\tb\n"
