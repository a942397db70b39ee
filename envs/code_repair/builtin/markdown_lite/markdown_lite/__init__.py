"""A markdown subset to HTML: headings, paragraphs, lists, fenced code, rules, emphasis, code spans, links."""

from .blocks import render
from .inline import escape_html, render_inline

__all__ = ["escape_html", "render", "render_inline"]
