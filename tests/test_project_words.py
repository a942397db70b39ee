"""Tracked files speak of the project, not of how it was made.

Every file ``git ls-files`` lists (binary files and files that are not UTF-8 are skipped) is read line by
line against a few patterns:

- a numbered work period ("session" and a number);
- an issue number of this project ("#" and 1-4 digits at a word start; an upstream project's issue is named
  without "#", e.g. "upstream swebench issue 631"); a hex colour of digits only in a stylesheet, page or
  script is a colour, not an issue;
- a path on the machine the project was made on: the checkout's parents, root's or a user's home
  (a test derives the checkout from ``Path(__file__)``; a guide writes a placeholder such as ``MIRRORS``);
- a folder under /tmp in prose (guides, README, examples), where a placeholder reads better; code may use /tmp
  (inside a sandbox it is the sandbox's own);
- a note on what is left to try.

A line that must name such a path (a probe that it is not visible inside a sandbox) is listed in ``ALLOWED``
with the reason, file by file: there is no blanket exclusion. Each pattern writes one of its characters as a
character class, so this file does not match itself.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Token start for a path: the start of the line, a space, a quote, or an opening bracket/operator; so
# "/proc/{pid}/root/workspace" or "src/work/" (relative) do not count.
_PATH_START = r"(?<![^\s\"'`(=:,\[<])"

PATTERNS: dict[str, re.Pattern[str]] = {
    "work period": re.compile(r"\b[Ss]essio[n] \d+"),
    "issue number": re.compile(r"(?<![\w/&])[#]\d{1,4}\b"),
    "machine path": re.compile(_PATH_START + r"/(?:w[o]rk|r[o]ot|h[o]me/[\w.-]+)/"),
    "left to try": re.compile(r"\b(?:next [s]ession|try [n]ext)\b|TODO\([s]ession", re.IGNORECASE),
}
PROSE_PATTERNS: dict[str, re.Pattern[str]] = {
    "temporary folder in prose": re.compile(_PATH_START + r"/t[m]p/[\w.-]+/"),
}
PROSE_SUFFIXES = (".md", ".rst", ".txt")
PROSE_FOLDERS = ("docs/", "examples/")
COLOUR_SUFFIXES = (".css", ".html", ".js", ".svg")
COLOUR_DIGITS = (3, 4, 6, 8)

# (file, text the hit contains): the only lines allowed to match, each with its reason.
ALLOWED: frozenset[tuple[str, str]] = frozenset({
    # The hostile-code tests probe that the host's root folder and checkout parent are NOT visible inside a
    # sandbox: naming them is the point of the test.
    ("tests/sandbox/test_hostile.py", "/ro" "ot/.cache"),
    # Root's home inside a Harbor task's image, where uv's installer script puts uv: a container path.
    ("sandbox/dockerfile.py", "/ro" "ot/.local/bin"),
    ("sandbox/dockerfile_run.py", "/ro" "ot/.local/bin"),
    ("tests/sandbox/test_dockerfile.py", "/ro" "ot/.local/bin"),
})


def tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [name for name in out.decode().split("\0") if name]


def _text(name: str) -> str | None:
    """The file's text, or None for a binary file, one that is not UTF-8, or one that is gone."""
    path = ROOT / name
    if not path.is_file():
        return None
    data = path.read_bytes()
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _is_prose(name: str) -> bool:
    return name.endswith(PROSE_SUFFIXES) or name.startswith(PROSE_FOLDERS)


def _is_colour(name: str, match: re.Match[str]) -> bool:
    return name.endswith(COLOUR_SUFFIXES) and len(match.group()) - 1 in COLOUR_DIGITS


def hits(name: str, text: str) -> list[str]:
    """``file:line: kind: line`` for every pattern a line of ``text`` matches (allowed lines left out)."""
    patterns = {**PATTERNS, **(PROSE_PATTERNS if _is_prose(name) else {})}
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for kind, pattern in patterns.items():
            for match in pattern.finditer(line):
                if kind == "issue number" and _is_colour(name, match):
                    continue
                if any(name == f and allowed in line for f, allowed in ALLOWED):
                    continue
                found.append(f"{name}:{number}: {kind} {match.group()!r}: {line.strip()[:120]}")
    return found


def test_the_patterns_catch_what_they_should_and_leave_the_rest() -> None:
    # each example is split in two, so that this file does not match itself
    bad = ["seen in sess" "ion 18", "fixed in #" "20", "(#" "16)", "see issue #" "5",
           "--repo-source /wo" "rk/mirrors", "pip cache in /ro" "ot/.cache/pip", "as /ho" "me/alice/src",
           "a lead for the next ses" "sion", "TODO(ses" "sion 3)"]
    good = ["upstream swebench issue 631", "# a heading", "color: #fff", "https://x.org/a#1", "&#123;",
            "a sandbox session", "/workspace/a", "/proc/{pid}/root/workspace", "cd /tmp/envfarm/x"]
    assert all(hits("notes.py", line) for line in bad), [line for line in bad if not hits("notes.py", line)]
    assert not [h for line in good for h in hits("notes.py", line)]
    assert hits("docs/guide.md", "--report-dir /tmp/val/x") and not hits("code.py", "/tmp/val/x")
    assert not hits("static/app.css", "color: #" "000;") and hits("static/page.html", "see #" "20")


def test_no_tracked_file_speaks_of_how_the_project_was_made() -> None:
    found = [h for name in tracked_files() if (text := _text(name)) is not None for h in hits(name, text)]
    assert not found, (
        f"{len(found)} lines speak of how the project was made (reword them to speak of the project: "
        "no work periods, no issue numbers, placeholders instead of machine paths):\n" + "\n".join(found))
