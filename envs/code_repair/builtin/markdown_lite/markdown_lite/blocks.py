"""Block structure: headings, paragraphs, lists, fenced code blocks and horizontal rules."""

from __future__ import annotations

import re

from .inline import escape_html, render_inline

_HEADING = re.compile(r"^(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_RULE = re.compile(r"^ {0,3}(?:(?:-[ \t]*){3,}|(?:\*[ \t]*){3,})$")
_BULLET = re.compile(r"^ {0,3}[-*+][ \t]+(.*)$")
_ORDERED = re.compile(r"^ {0,3}(\d{1,9})[.)][ \t]+(.*)$")
_FENCE = re.compile(r"^ {0,3}(```+)[ \t]*([\w+-]*)[ \t]*$")


class _Renderer:
    def __init__(self) -> None:
        self.out: list[str] = []
        self.paragraph: list[str] = []
        self.list_kind: str | None = None
        self.items: list[str] = []
        self.list_start = 1

    def flush_paragraph(self) -> None:
        if self.paragraph:
            self.out.append("<p>" + render_inline(" ".join(self.paragraph)) + "</p>")
            self.paragraph = []

    def flush_list(self) -> None:
        if self.list_kind:
            start = f' start="{self.list_start}"' if self.list_kind == "ol" and self.list_start != 1 else ""
            body = "".join(f"<li>{render_inline(item)}</li>" for item in self.items)
            self.out.append(f"<{self.list_kind}{start}>{body}</{self.list_kind}>")
            self.list_kind, self.items = None, []

    def flush(self) -> None:
        self.flush_paragraph()
        self.flush_list()

    def add_item(self, kind: str, text: str, start: int = 1) -> None:
        self.flush_paragraph()
        if self.list_kind != kind:
            self.flush_list()
            self.list_kind, self.list_start = kind, start
        self.items.append(text.strip())


def render(markdown: str) -> str:
    """Render ``markdown`` to an HTML fragment, one block per line."""
    r = _Renderer()
    lines = markdown.expandtabs(4).splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            r.flush()
            marker, lang = fence.group(1), fence.group(2)
            body = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(marker):
                body.append(lines[i])
                i += 1
            cls = f' class="language-{lang}"' if lang else ""
            code = escape_html("\n".join(body) + "\n" if body else "")
            r.out.append(f"<pre><code{cls}>{code}</code></pre>")
            i += 1
            continue
        if not line.strip():
            r.flush()
        elif m := _HEADING.match(line):
            r.flush()
            level = len(m.group(1))
            r.out.append(f"<h{level}>{render_inline(m.group(2))}</h{level}>")
        elif _RULE.match(line):
            r.flush()
            r.out.append("<hr />")
        elif m := _BULLET.match(line):
            r.add_item("ul", m.group(1))
        elif m := _ORDERED.match(line):
            r.add_item("ol", m.group(2), int(m.group(1)))
        elif r.list_kind and line.startswith("  ") and not r.paragraph:
            r.items[-1] += " " + line.strip()
        else:
            r.flush_list()
            r.paragraph.append(line.strip())
        i += 1
    r.flush()
    return "\n".join(r.out)
