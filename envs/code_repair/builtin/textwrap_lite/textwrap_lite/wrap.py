from __future__ import annotations

from typing import Callable, Optional


def _words(text: str) -> list[str]:
    return text.split()


def wrap(text: str, width: int = 70, *, initial_indent: str = "", subsequent_indent: str = "",
         break_long_words: bool = True) -> list[str]:
    """Wrap *text* into lines of at most *width* characters (indents included).

    Whitespace runs collapse to single spaces. Words longer than the available room are split when
    *break_long_words* is true, otherwise they get a line of their own (which is then too long).
    """
    if width <= 0:
        raise ValueError(f"invalid width {width!r} (must be > 0)")
    for ind in (initial_indent, subsequent_indent):
        if len(ind) >= width:
            raise ValueError("indent leaves no room for text")
    lines: list[str] = []
    current: list[str] = []
    cur_len = 0

    def room() -> int:
        return width - len(subsequent_indent if lines else initial_indent)

    def flush() -> None:
        nonlocal current, cur_len
        prefix = subsequent_indent if lines else initial_indent
        lines.append(prefix + " ".join(current))
        current, cur_len = [], 0

    pending = _words(text)
    pending.reverse()
    while pending:
        word = pending.pop()
        needed = len(word) if not current else cur_len + 1 + len(word)
        if needed <= room():
            current.append(word)
            cur_len = needed
            continue
        if current:
            flush()
            pending.append(word)
            continue
        # the word alone does not fit on an empty line
        if break_long_words:
            r = room()
            current.append(word[:r])
            cur_len = r
            pending.append(word[r:])
            flush()
        else:
            current.append(word)
            cur_len = len(word)
            flush()
    if current:
        flush()
    return lines


def fill(text: str, width: int = 70, **kwargs) -> str:
    return "\n".join(wrap(text, width, **kwargs))


def justify(text: str, width: int = 70) -> list[str]:
    """Wrap and fully justify: every line but the last is padded to exactly *width* by widening the gaps
    between words, the leftmost gaps getting the extra spaces first. The last line is left-aligned."""
    lines = wrap(text, width)
    out = []
    for line in lines[:-1]:
        words = line.split(" ")
        if len(words) == 1:
            out.append(line.ljust(width))
            continue
        gaps = len(words) - 1
        spaces = width - sum(len(w) for w in words)
        base, extra = divmod(spaces, gaps)
        parts = []
        for i, w in enumerate(words[:-1]):
            parts.append(w + " " * (base + (1 if i < extra else 0)))
        parts.append(words[-1])
        out.append("".join(parts))
    if lines:
        out.append(lines[-1])
    return out


def shorten(text: str, width: int, placeholder: str = " [...]") -> str:
    """Collapse whitespace and truncate at a word boundary so that the result fits in *width*."""
    collapsed = " ".join(_words(text))
    if len(collapsed) <= width:
        return collapsed
    if len(placeholder.lstrip()) > width:
        raise ValueError("placeholder too large for max width")
    kept: list[str] = []
    length = 0
    for word in _words(text):
        extra = len(word) + (1 if kept else 0)
        if length + extra + len(placeholder) > width:
            break
        kept.append(word)
        length += extra
    if not kept:
        return placeholder.lstrip()
    return " ".join(kept) + placeholder


def indent(text: str, prefix: str, predicate: Optional[Callable[[str], bool]] = None) -> str:
    """Add *prefix* to the lines of *text* selected by *predicate* (default: lines that are not blank)."""
    if predicate is None:
        def predicate(line: str) -> bool:
            return bool(line.strip())
    return "".join(prefix + line if predicate(line) else line for line in text.splitlines(keepends=True))


def dedent(text: str) -> str:
    """Remove the whitespace prefix common to all non-blank lines; blank lines become empty."""
    lines = text.splitlines(keepends=True)
    margin: Optional[str] = None
    for line in lines:
        stripped = line.lstrip(" \t")
        if not stripped.strip("\r\n"):
            continue
        lead = line[: len(line) - len(stripped)]
        if margin is None:
            margin = lead
        else:
            i = 0
            while i < len(margin) and i < len(lead) and margin[i] == lead[i]:
                i += 1
            margin = margin[:i]
    out = []
    for line in lines:
        if not line.strip(" \t\r\n"):
            out.append(line[len(line.rstrip("\r\n")):])
        else:
            out.append(line[len(margin or ""):])
    return "".join(out)
