from markdown_lite import escape_html, render, render_inline


def test_escape_html():
    assert escape_html('<a href="x">&</a>') == "&lt;a href=&quot;x&quot;&gt;&amp;&lt;/a&gt;"


def test_headings():
    assert render("# Title") == "<h1>Title</h1>"
    assert render("### Sub *part* ###") == "<h3>Sub <em>part</em></h3>"
    assert render("####### seven") == "<p>####### seven</p>"


def test_hash_without_space_is_text():
    assert render("#hashtag") == "<p>#hashtag</p>"


def test_paragraphs_join_lines():
    assert render("one\ntwo\n\nthree") == "<p>one two</p>\n<p>three</p>"


def test_emphasis_and_strong():
    assert render_inline("*a* and **b** and __c__ and _d_") == "<em>a</em> and <strong>b</strong> and <strong>c</strong> and <em>d</em>"


def test_lone_asterisks_are_literal():
    assert render_inline("2 * 3 * 4") == "2 * 3 * 4"


def test_code_span_is_literal_and_escaped():
    assert render_inline("use `a*b*c` or `<br>`") == "use <code>a*b*c</code> or <code>&lt;br&gt;</code>"
    assert render_inline("``x ` y``") == "<code>x ` y</code>"


def test_backslash_escapes():
    assert render_inline(r"\*not em\*") == "*not em*"
    assert render_inline(r"\<b\>") == "&lt;b&gt;"


def test_text_is_escaped():
    assert render("Tom & Jerry <3") == "<p>Tom &amp; Jerry &lt;3</p>"


def test_links():
    assert render_inline("see [the docs](https://example.com/a?b=1&c=2)") == (
        'see <a href="https://example.com/a?b=1&amp;c=2">the docs</a>'
    )
    assert render_inline("[x](javascript:alert(1))") == '<a href="#">x</a>)'


def test_unordered_list():
    assert render("- one\n- *two*\n* three") == "<ul><li>one</li><li><em>two</em></li><li>three</li></ul>"


def test_ordered_list_with_start():
    assert render("3. c\n4. d") == '<ol start="3"><li>c</li><li>d</li></ol>'
    assert render("1) a") == "<ol><li>a</li></ol>"


def test_list_kind_change_and_paragraph_after():
    html = render("- a\n1. b\ntext")
    assert html == "<ul><li>a</li></ul>\n<ol><li>b</li></ol>\n<p>text</p>"


def test_list_item_continuation():
    assert render("- long\n  item\n- next") == "<ul><li>long item</li><li>next</li></ul>"


def test_horizontal_rule():
    assert render("a\n\n---\n\n* * *") == "<p>a</p>\n<hr />\n<hr />"


def test_fenced_code():
    md = "```python\nif a < b:\n    *x* = 1\n```\nafter"
    assert render(md) == '<pre><code class="language-python">if a &lt; b:\n    *x* = 1\n</code></pre>\n<p>after</p>'


def test_unclosed_fence_runs_to_end():
    assert render("```\ncode") == "<pre><code>code\n</code></pre>"
