import pytest

from tokenizer import Token, TokenizeError, tokenize


def kinds(src):
    return [t.kind for t in tokenize(src)]


def texts(src):
    return [t.text for t in tokenize(src)[:-1]]


def test_empty_source_is_just_eof():
    toks = tokenize("")
    assert toks == [Token("EOF", "", None, 1, 1)]


def test_integers_and_floats():
    toks = tokenize("12 3.5 1e3 2.5E-2")
    assert [t.value for t in toks[:-1]] == [12, 3.5, 1000.0, 0.025]
    assert isinstance(toks[0].value, int)


def test_number_followed_by_dot_without_digits():
    # "1." is the number 1 followed by an unexpected '.'
    with pytest.raises(TokenizeError) as exc:
        tokenize("1.")
    assert (exc.value.line, exc.value.col) == (1, 2)


def test_invalid_number_literal():
    with pytest.raises(TokenizeError, match="invalid number literal"):
        tokenize("12abc")


def test_identifiers_and_keywords():
    toks = tokenize("let x_1 = true")
    assert [(t.kind, t.value) for t in toks[:-1]] == [
        ("KEYWORD", "let"), ("IDENT", "x_1"), ("OP", "="), ("KEYWORD", True),
    ]


def test_keyword_prefix_is_identifier():
    assert kinds("letter iffy") == ["IDENT", "IDENT", "EOF"]


def test_two_char_operators():
    assert texts("a == b != c <= d >= e -> f") == ["a", "==", "b", "!=", "c", "<=", "d", ">=", "e", "->", "f"]


def test_operators_without_spaces():
    assert texts("(a+b)*c-1") == ["(", "a", "+", "b", ")", "*", "c", "-", "1"]


def test_string_with_escapes():
    tok = tokenize(r'"a\tb\n\"q\"\\"')[0]
    assert tok.kind == "STRING"
    assert tok.value == 'a\tb\n"q"\\'


def test_unterminated_string_reports_start():
    with pytest.raises(TokenizeError) as exc:
        tokenize('x = "abc')
    assert exc.value.message == "unterminated string"
    assert (exc.value.line, exc.value.col) == (1, 5)


def test_string_cannot_span_lines():
    with pytest.raises(TokenizeError, match="unterminated"):
        tokenize('"abc\ndef"')


def test_unknown_escape():
    with pytest.raises(TokenizeError, match="unknown escape"):
        tokenize(r'"\q"')


def test_positions_on_first_line():
    toks = tokenize("let x = 10")
    assert [(t.line, t.col) for t in toks] == [(1, 1), (1, 5), (1, 7), (1, 9), (1, 11)]


def test_comments_are_skipped():
    assert texts("a # comment here\nb") == ["a", "b"]


def test_unexpected_character():
    with pytest.raises(TokenizeError) as exc:
        tokenize("a @ b")
    assert "unexpected character '@'" in str(exc.value)
    assert exc.value.col == 3


def test_eof_position_after_trailing_whitespace():
    toks = tokenize("a  ")
    assert (toks[-1].line, toks[-1].col) == (1, 4)
