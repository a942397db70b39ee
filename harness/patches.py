"""Reading unified diffs (git or plain) without applying them: which paths a patch touches and how.

Used to reset the files a ``test_patch`` names, to choose test directives, and by the tamper rules, which
must see every path a model patch writes, renames, deletes or turns into a symlink.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

_GIT_HEADER = re.compile(r"^diff --git (\"?)a/(.+?)\1 (\"?)b/(.+?)\3$")
_PLAIN_OLD = re.compile(r"^--- (?:\"?a/)?(.+?)\"?(?:\t.*)?$")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_PLAIN_NEW = re.compile(r"^\+\+\+ (?:\"?b/)?(.+?)\"?(?:\t.*)?$")
DEV_NULL = "/dev/null"
SYMLINK_MODE = "120000"


@dataclass(frozen=True)
class FileChange:
    """One file section of a patch."""

    old_path: str | None
    """Path before (None for a created file)."""
    new_path: str | None
    """Path after (None for a deleted file)."""
    symlink: bool = False
    """The section creates or changes a symbolic link (mode 120000)."""
    added_lines: tuple[str, ...] = field(default=(), repr=False)
    removed_lines: tuple[str, ...] = field(default=(), repr=False)
    context_lines: tuple[str, ...] = field(default=(), repr=False)
    added_blocks: tuple[tuple[str, ...], ...] = field(default=(), repr=False)
    """Runs of consecutive added lines, in order (each is a piece of the post-patch text)."""

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p for p in (self.old_path, self.new_path) if p))

    @property
    def created(self) -> bool:
        return self.old_path is None


def parse(patch: str) -> list[FileChange]:
    """The file sections of ``patch``, in order (git-style or plain ``---``/``+++`` headers).

    Hunk bodies are consumed by the line counts in their ``@@`` headers, so a content line that looks like a
    header (``--- x`` as a removed ``-- x``) is read as content."""
    sections: list[FileChange] = []
    current: dict[str, Any] | None = None
    for line in patch.splitlines():
        if current is not None and (current["old_left"] > 0 or current["new_left"] > 0):
            _hunk_line(current, line)
            continue
        head = _GIT_HEADER.match(line)
        if head or (line.startswith("--- ") and (current is None or current["hunks"])):
            if current is not None:
                sections.append(_finish(current))
            current = _new_section(head.group(2), head.group(4)) if head else _new_section(None, None)
            if head:
                continue
        if current is not None:
            _header_line(current, line)
    if current is not None:
        sections.append(_finish(current))
    return [s for s in sections if s.paths]


def _new_section(old: str | None, new: str | None) -> dict[str, Any]:
    return {
        "old": old,
        "new": new,
        "symlink": False,
        "hunks": False,
        "add": [],
        "rem": [],
        "ctx": [],
        "blocks": [],
        "in_block": False,
        "old_left": 0,
        "new_left": 0,
    }


def _header_line(cur: dict[str, Any], line: str) -> None:
    if line.startswith("@@") and (m := _HUNK.match(line)):
        cur["hunks"] = True
        cur["in_block"] = False
        cur["old_left"] = int(m.group(2) or 1)
        cur["new_left"] = int(m.group(4) or 1)
    elif cur["hunks"]:
        return
    elif line.startswith("--- ") and (m := _PLAIN_OLD.match(line)):
        cur["old"] = m.group(1)
    elif line.startswith("+++ ") and (m := _PLAIN_NEW.match(line)):
        cur["new"] = m.group(1)
    elif line.startswith(("new file mode ", "new mode ", "old mode ", "deleted file mode ")):
        cur["symlink"] = cur["symlink"] or line.endswith(SYMLINK_MODE)
        cur["created"] = cur.get("created") or line.startswith("new file mode")
        cur["deleted"] = cur.get("deleted") or line.startswith("deleted file mode")
    elif line.startswith(("rename from ", "copy from ")):
        cur["old"] = line.split(" ", 2)[2]
    elif line.startswith(("rename to ", "copy to ")):
        cur["new"] = line.split(" ", 2)[2]


def _hunk_line(cur: dict[str, Any], line: str) -> None:
    tag, text = line[:1], line[1:]
    if tag == "+":
        cur["add"].append(text)
        cur["new_left"] -= 1
        if not cur["in_block"]:
            cur["blocks"].append([])
        cur["blocks"][-1].append(text)
        cur["in_block"] = True
        return
    cur["in_block"] = tag in ("-", "\\") and cur["in_block"]  # removed lines are not in the post text
    if tag == "-":
        cur["rem"].append(text)
        cur["old_left"] -= 1
    elif tag in (" ", ""):
        cur["ctx"].append(text)
        cur["old_left"] -= 1
        cur["new_left"] -= 1
    # "\ No newline at end of file" counts for neither side


def _finish(cur: dict[str, Any]) -> FileChange:
    old = None if cur["old"] in (None, DEV_NULL) or cur.get("created") else str(cur["old"])
    new = None if cur["new"] in (None, DEV_NULL) or cur.get("deleted") else str(cur["new"])
    return FileChange(
        old,
        new,
        bool(cur["symlink"]),
        tuple(cur["add"]),
        tuple(cur["rem"]),
        tuple(cur["ctx"]),
        tuple(tuple(b) for b in cur["blocks"]),
    )


def touched_paths(patch: str) -> list[str]:
    """Every repository path the patch reads or writes (old and new names), in order, deduplicated."""
    return list(dict.fromkeys(p for change in parse(patch) for p in change.paths))


def unsafe_paths(patch: str) -> list[str]:
    """Paths that leave the repository or reach into ``.git``: absolute, ``..``, or a ``.git`` component."""
    bad = []
    for path in touched_paths(patch):
        norm = posixpath.normpath(path)
        parts = norm.split("/")
        if path.startswith("/") or norm.startswith("..") or ".git" in parts or "\0" in path:
            bad.append(path)
    return bad
