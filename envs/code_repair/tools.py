"""CodeRepair's tool arguments (pydantic, OpenAI schema) and the sandbox side of its file tools."""

from __future__ import annotations

import posixpath
import shlex

from pydantic import BaseModel, ConfigDict, Field

from envfarm.errors import SandboxFileError
from envfarm.harness.grading import InstanceReport, Outcome
from envfarm.harness.images import WORKDIR
from envfarm.sandbox import ExecResult, Sandbox

from ..core import command_output, truncate

MAX_OUTPUT_CHARS = 8000
MAX_VIEW_CHARS = 12000
MAX_TIMEOUT_S = 600.0
MAX_MATCHES = 100
LISTING_DEPTH = 2
SHOWN_TESTS = 5


class BashArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    command: str = Field(min_length=1, max_length=20_000, description="A bash command line, run in the repo.")
    timeout_s: float = Field(0, ge=0, le=MAX_TIMEOUT_S,
                             description="Seconds before the command is killed (0: the env's default).")


class ViewArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(".", min_length=1, description="A file or directory (relative to the repository).")
    start_line: int = Field(1, ge=1, description="First line to show (1-based).")
    end_line: int = Field(-1, ge=-1, description="Last line to show (inclusive); -1: the end of the file.")


class StrReplaceArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(min_length=1, description="The file to edit.")
    old_str: str = Field(min_length=1, description="Exact text to replace; must occur exactly once.")
    new_str: str = Field(description="The replacement text.")


class CreateArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(min_length=1, description="The file to write (parents are created).")
    content: str = Field(max_length=1 << 20, description="The whole content of the file.")


class SearchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pattern: str = Field(min_length=1, max_length=1000, description="An extended regular expression.")
    path: str = Field(".", min_length=1, description="File or directory to search (default: the repo).")
    fixed_string: bool = Field(False, description="Match the pattern literally instead of as a regex.")
    ignore_case: bool = Field(False, description="Case-insensitive matching.")


class RunTestsArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    paths: list[str] = Field(default_factory=list, max_length=100,
                             description="Test files or node ids (default: the repository's tests).")


class NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


def resolve(path: str) -> str:
    """An absolute, normalised path; relative paths are under the repository."""
    return posixpath.normpath(path if path.startswith("/") else posixpath.join(WORKDIR, path))


def show(res: ExecResult, timeout: float, hint: str, keep_tail: bool = False) -> str:
    """A command's output for the agent: stdout, stderr, and how it ended."""
    return command_output(res, timeout, hint, MAX_OUTPUT_CHARS, keep_tail)


async def view(sb: Sandbox, path: str, start: int, end: int) -> str:
    is_dir = await sb.exec(["test", "-d", path], timeout_s=30)
    if is_dir.exit_code == 0:
        res = await sb.exec(["find", path, "-mindepth", "1", "-maxdepth", str(LISTING_DEPTH), "(", "-name",
                             ".git", "-o", "-name", "__pycache__", ")", "-prune", "-o", "-print"],
                            timeout_s=30)
        names = sorted(res.stdout.splitlines())
        return truncate(f"{path}:\n" + "\n".join(names), MAX_VIEW_CHARS,
                        "view a subdirectory to see its contents")
    try:
        text = (await sb.read_file(path)).decode("utf-8", errors="replace")
    except SandboxFileError:
        return f"Error: {path} does not exist (or is not readable). List a directory with view(path='.')."
    lines = text.splitlines()
    first, last = start, len(lines) if end == -1 else min(end, len(lines))
    if not lines:
        return f"{path} is empty."
    if first > len(lines) or last < first:
        return f"Error: lines {first}..{end} are outside {path}, which has {len(lines)} lines."
    body = "\n".join(f"{n:6}\t{lines[n - 1]}" for n in range(first, last + 1))
    return truncate(f"{path} (lines {first}-{last} of {len(lines)}):\n{body}", MAX_VIEW_CHARS,
                    "pass start_line and end_line to see the rest")


async def str_replace(sb: Sandbox, path: str, old: str, new: str) -> str:
    try:
        text = (await sb.read_file(path)).decode("utf-8")
    except SandboxFileError:
        return f"Error: {path} does not exist (or is not readable); create it with create."
    except UnicodeDecodeError:
        return f"Error: {path} is not UTF-8 text; edit it with bash."
    count = text.count(old)
    if count != 1:
        where = [str(text[:i].count("\n") + 1) for i in _find_all(text, old)][:10]
        at = f" (at lines {', '.join(where)})" if where else ""
        return (f"Error: old_str occurs {count} times in {path}{at}; it must occur exactly once. Include "
                "more surrounding lines to make it unique." if count else
                f"Error: old_str was not found in {path}; view the file and copy the exact text (whitespace "
                "included).")
    updated = text.replace(old, new)
    await sb.write_file(path, updated)
    line = text[: text.index(old)].count("\n") + 1
    lines = updated.splitlines()
    lo, hi = max(1, line - 3), min(len(lines), line + new.count("\n") + 3)
    snippet = "\n".join(f"{n:6}\t{lines[n - 1]}" for n in range(lo, hi + 1))
    return f"Edited {path}; lines {lo}-{hi} now read:\n{snippet}"


def _find_all(text: str, sub: str) -> list[int]:
    out, i = [], text.find(sub)
    while i != -1:
        out.append(i)
        i = text.find(sub, i + 1)
    return out


async def search(sb: Sandbox, args: SearchArgs) -> str:
    flags = ["-rnI", "--exclude-dir=.git", "--exclude-dir=__pycache__", "-F" if args.fixed_string else "-E"]
    if args.ignore_case:
        flags.append("-i")
    res = await sb.exec(["grep", *flags, "-e", args.pattern, "--", args.path], cwd=WORKDIR, timeout_s=60)
    if res.exit_code == 1:
        return f"No matches for {args.pattern!r} in {args.path}."
    if res.exit_code != 0:
        return f"Error: grep failed: {res.stderr.strip()[-500:] or res.exit_code}"
    lines = res.stdout.splitlines()
    more = f"\n[{len(lines) - MAX_MATCHES} more matches; narrow the pattern or the path]" \
        if len(lines) > MAX_MATCHES else ""
    return truncate("\n".join(line[:300] for line in lines[:MAX_MATCHES]) + more, MAX_OUTPUT_CHARS,
                    "narrow the pattern or the path")


def verdict(report: InstanceReport) -> str:
    """The observation after grading."""
    if report.outcome is Outcome.EMPTY_PATCH:
        return "You submitted no changes; the issue is not resolved. Episode finished."
    tests = report.tests
    if report.resolved:
        return "Resolved: every hidden test passes. Episode finished."
    parts = ["Not resolved."]
    if tests is not None:
        failing = [*tests.fail_to_pass_failure, *tests.pass_to_pass_failure]
        f2p = len(tests.fail_to_pass_success) + len(tests.fail_to_pass_failure)
        parts.append(f"{len(tests.fail_to_pass_success)} of {f2p} tests for the issue pass; "
                     f"{len(tests.pass_to_pass_failure)} previously passing tests fail.")
        if failing:
            parts.append("Failing: " + ", ".join(shlex.quote(t) for t in failing[:SHOWN_TESTS]) +
                         (" ..." if len(failing) > SHOWN_TESTS else ""))
    if report.findings:
        parts.append("Ignored changes (tamper rules): " + "; ".join(f.describe() for f in report.findings))
    return " ".join(parts) + " Episode finished."
