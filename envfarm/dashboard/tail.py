"""Reading what was appended to a JSONL file since the last look, by byte offset (each line read once)."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHUNK = 64 << 20
"""At most this many bytes per read; the rest comes on the next call."""


@dataclass
class Throttle:
    """A reader's refresh rate: :meth:`due` is true at most once every ``every_s`` seconds, unless forced.
    Call it under the reader's own lock."""

    every_s: float
    _last: float = -math.inf

    def due(self, force: bool = False) -> bool:
        now = time.monotonic()
        if not force and now - self._last < self.every_s:
            return False
        self._last = now
        return True


@dataclass(frozen=True)
class Line:
    """One complete line: where it starts in the file, its length with the newline, and its bytes."""

    offset: int
    length: int
    data: bytes


class JsonlTail:
    """Follows one append-only file: :meth:`read_new` returns the complete lines added since the last call.

    A torn last line (no newline yet) is left for the next call. A file that shrank or was replaced
    (smaller than what was read) is read again from the start, and :attr:`resets` counts that."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.offset = 0
        self.resets = 0
        self._inode: int | None = None

    def read_new(self) -> tuple[bool, list[Line]]:
        """(whether the file was reset, the new complete lines). Blocking."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return False, []
        reset = st.st_size < self.offset or (self._inode is not None and st.st_ino != self._inode)
        if reset:
            self.offset, self.resets = 0, self.resets + 1
        self._inode = st.st_ino
        if st.st_size == self.offset:
            return reset, []
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read(min(CHUNK, st.st_size - self.offset))
        end = data.rfind(b"\n")
        if end < 0:
            return reset, []
        lines, pos = [], 0
        for raw in data[: end + 1].splitlines(keepends=True):
            if raw.strip():
                lines.append(Line(self.offset + pos, len(raw), raw))
            pos += len(raw)
        self.offset += end + 1
        return reset, lines

    def read_at(self, offset: int, length: int) -> bytes:
        """The bytes of one line read earlier (for opening a single record later). Blocking."""
        with self.path.open("rb") as f:
            f.seek(offset)
            return f.read(length)


def read_json(path: Path) -> dict[str, Any] | None:
    """A small JSON object file (summary.json, report.json), or None when missing or unreadable. Blocking."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


__all__ = ["JsonlTail", "Line", "read_json"]
