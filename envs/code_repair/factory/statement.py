"""Problem statements for mined tasks, written from the failing tests' output (never from the mutation).

    text = problem_statement("cachetools", f2p, log, hidden_files, mutated_file="src/cachetools/func.py")

The statement names the failing tests and quotes the exception lines (pytest's ``E`` lines) of the first
few failures, like a user's bug report with a test run pasted in. Lines that mention the changed source
file are left out, memory addresses and timings are normalised, so the text says what is wrong and not
where or how the code was changed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

MAX_TESTS_SHOWN = 8
MAX_FAILURES_QUOTED = 3
MAX_LINES_PER_FAILURE = 8
MAX_LINE_CHARS = 200
_HEADER = re.compile(r"^_{3,} (.+?) _{3,}$")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")
_SECONDS = re.compile(r"\b\d+\.\d+s\b")


def sections(log: str) -> dict[str, list[str]]:
    """pytest's failure sections: header name (``Class.test[param]``) -> the section's lines."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in log.splitlines():
        if m := _HEADER.match(line):
            current = out.setdefault(m.group(1), [])
        elif line.startswith("=" * 5):
            current = None
        elif current is not None:
            current.append(line)
    return out


def header_name(test_id: str) -> str:
    """``tests/test_a.py::TestC::test_x[1]`` -> ``TestC.test_x[1]`` (pytest's section header)."""
    return ".".join(test_id.split("::")[1:]) or test_id


def _clean(line: str) -> str:
    line = _SECONDS.sub("N.NNs", _ADDRESS.sub("0x...", line.rstrip()))
    return line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 3] + "..."


def quoted_failure(lines: Sequence[str], hide: Sequence[str]) -> list[str]:
    """The exception (``E``) lines of one failure section, without lines that name a hidden path."""
    out = []
    for line in lines:
        if line.startswith("E ") and not any(h and h in line for h in hide):
            out.append(_clean(line))
        if len(out) >= MAX_LINES_PER_FAILURE:
            break
    return out


def problem_statement(package: str, fail_to_pass: Sequence[str], pass_count: int, log: str,
                      mutated_file: str) -> str:
    """A bug report for the failing tests ``fail_to_pass`` of ``package``'s suite."""
    files = sorted({t.split("::", 1)[0] for t in fail_to_pass})
    hide = [mutated_file, mutated_file.rsplit("/", 1)[-1]]
    n = len(fail_to_pass)
    parts = [
        f"Something is broken in `{package}`: {n} test{'s' if n != 1 else ''} of its own suite "
        f"({', '.join(f'`{f}`' for f in files)}) fail{'s' if n == 1 else ''}, while "
        f"{pass_count} other test{'s' if pass_count != 1 else ''} in the same file"
        f"{'s' if len(files) != 1 else ''} still pass{'es' if pass_count == 1 else ''}.",
        "",
        "Failing tests:",
        *(f"- `{t}`" for t in fail_to_pass[:MAX_TESTS_SHOWN]),
    ]
    if n > MAX_TESTS_SHOWN:
        parts.append(f"- ... and {n - MAX_TESTS_SHOWN} more")
    found = sections(log)
    quotes = []
    for test in fail_to_pass:
        lines = quoted_failure(found.get(header_name(test), []), hide)
        if lines:
            quotes.append((test, lines))
        if len(quotes) >= MAX_FAILURES_QUOTED:
            break
    if quotes:
        parts += ["", "What pytest reports:", "", "```"]
        for test, lines in quotes:
            parts += [f"{test}", *lines, ""]
        parts[-1] = "```"
    parts += ["", "Expected: these tests pass again, without changing the tests."]
    return "\n".join(parts) + "\n"
