"""Inline markup: code spans, backslash escapes, links, strong and emphasis."""

from __future__ import annotations

import re

_PUNCT = r"""!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~"""
_PROTECTED = re.compile(r"(`+)(.+?)\1|\\([" + _PUNCT + r"])")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_STRONG = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_EM_STAR = re.compile(r"\*(?=\S)(.+?)(?<=\S)\*")
_EM_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_(?=\S)(.+?)(?<=\S)_(?![A-Za-z0-9])")
_SAFE_SCHEMES = ("http:", "https:", "mailto:")


def escape_html(text: str) -> str:
    """Escape the characters that are special in HTML text and attribute values."""
    s = text
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return s.replace('"', "&quot;")


def _safe_url(url: str) -> str:
    if ":" in url.split("/", 1)[0] and not url.lower().startswith(_SAFE_SCHEMES):
        return "#"
    return url


def render_inline(text: str) -> str:
    """Render one block's inline content to HTML."""
    stash: list[str] = []

    def protect(html: str) -> str:
        stash.append(html)
        return f"\x00{len(stash) - 1}\x00"

    def protected(m: re.Match) -> str:
        if m.group(3) is not None:
            return protect(escape_html(m.group(3)))
        return protect("<code>" + escape_html(m.group(2).strip()) + "</code>")

    text = _PROTECTED.sub(protected, text)
    text = escape_html(text)

    def link(m: re.Match) -> str:
        return f'<a href="{_safe_url(m.group(2))}">{m.group(1)}</a>'

    text = _LINK.sub(link, text)
    text = _STRONG.sub(r"<strong>\2</strong>", text)
    text = _EM_STAR.sub(r"<em>\1</em>", text)
    text = _EM_UNDERSCORE.sub(r"<em>\1</em>", text)
    return re.sub("\x00(\\d+)\x00", lambda m: stash[int(m.group(1))], text)
