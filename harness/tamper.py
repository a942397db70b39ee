"""Tamper rules: a model patch may change the code under test, not the machinery that judges it.

swebench 5.0.2 resolves a patch that only adds a ``conftest.py`` flipping every outcome to passed
(upstream swebench issue 631). envfarm checks every path a model patch touches (the patch's own headers,
plus what ``git status`` shows changed after it was applied) against the rules below, before the tests
run. Under the default policy ``revert`` each offending path is restored to the base commit (or removed when
new) and the tests run on the rest of the patch; ``flag`` leaves the file and marks the instance not
resolved; ``off`` reproduces SWE-bench (for comparisons only). Paths outside the repository or inside
``.git`` are always refused: the patch is not applied at all. The per-instance report lists each
:class:`Finding`.

What the rules cannot catch: code in the patched package itself runs inside the test process and can
rewrite the test framework in memory or print a fake run and exit (for pytest-dev/pytest the package *is*
the runner). The general defence against that is ``canary.py`` (tests the patch cannot know, checked in
every graded run); the rules here stop the cheap, file-level forgeries before the tests run. The log
markers swebench's parsers rely on are neutralised in the captured output (run.py), so printed markers
cannot cut the parsed region.
"""

from __future__ import annotations

import configparser
import enum
import fnmatch
import posixpath
import re
import shlex
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import patches
from .patches import FileChange


class Policy(enum.StrEnum):
    """What to do when a rule fires."""

    REVERT = "revert"
    """Restore the path to the base commit before the tests run; record the finding (the default)."""
    FLAG = "flag"
    """Leave the change, run the tests, and mark the instance not resolved."""
    OFF = "off"
    """Apply no rule (SWE-bench's behaviour, upstream swebench issue 631): for comparisons only."""


RULES: dict[str, str] = {
    "unsafe-path": "a path outside the repository or inside .git (the patch is refused, not applied)",
    "symlink": "creates or changes a symbolic link (could redirect test files or configs)",
    "conftest": "adds, changes or removes a conftest.py anywhere (pytest hooks can rewrite outcomes)",
    "pytest-config": "pytest.toml/.pytest.toml (pytest 9), pytest.ini/.pytest.ini, tox.ini, setup.cfg "
    "[tool:pytest]/[pytest], pyproject [tool.pytest*], anywhere in the tree: test options such as addopts "
    "(-p plugins), python_files, testpaths, filterwarnings",
    "pytest-plugin": "registers a pytest plugin: a pytest11 entry point (setup.py/setup.cfg/pyproject) or "
    "installed metadata (*.egg-info, *.dist-info)",
    "startup-hook": "sitecustomize.py, usercustomize.py or a .pth file (code run at interpreter start)",
    "shadow-module": "adds a top-level module that shadows test tooling (pytest, _pytest, pluggy, unittest…)",
    "test-files": "changes files under test folders (tests/, testing/, test/, test_*.py, the folders of "
    "test_patch's files) or files the spec protects",
    "test-runner": "changes a file the test command runs (e.g. tests/runtests.py, bin/test)",
}
SHADOWED = frozenset(
    {
        "pytest",
        "_pytest",
        "pluggy",
        "py",
        "unittest",
        "nose",
        "nose2",
        "iniconfig",
        "doctest",
        "tox",
        "coverage",
        "xdist",
        "pytest_timeout",
        "hypothesis",
        "conftest",
    }
)
TEST_DIRS = frozenset({"tests", "testing"})
_TEST_NAME = re.compile(r"^(test_.*|.*_test|tests)\.py$")
PYTEST_FILES = ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini", "tox.ini")
"""Files pytest reads as a whole for its options (any pytest version up to 9)."""
CONFIG_FILES = ("setup.cfg", "pyproject.toml", "setup.py", *PYTEST_FILES)


@dataclass(frozen=True)
class Finding:
    """One rule that fired on one path."""

    rule: str
    """A key of :data:`RULES`."""
    path: str
    action: str
    """"reverted", "flagged", "refused" or "ignored" (policy off)."""
    detail: str = ""

    @property
    def blocks_resolution(self) -> bool:
        """True when the tests ran on (or never got) the tampered tree: the instance cannot be resolved."""
        return self.action in ("flagged", "refused")

    def describe(self) -> str:
        return f"{self.rule}: {self.path} ({self.action}){' - ' + self.detail if self.detail else ''}"


@dataclass(frozen=True)
class Context:
    """What the rules know about the instance."""

    test_files: tuple[str, ...] = ()
    """Files test_patch touches; their folders count as test folders."""
    test_command: str = ""
    protected: tuple[str, ...] = ()
    """Extra globs from the spec (a repo's own runner code, e.g. sympy/utilities/runtests.py)."""


def scan(
    changes: Sequence[FileChange],
    extra_paths: Iterable[str] = (),
    ctx: Context = Context(),
    contents: Mapping[str, tuple[str | None, str | None]] | None = None,
    action: str = "reverted",
) -> list[Finding]:
    """Every rule that fires for the patch ``changes`` plus ``extra_paths`` (changed per ``git status``).

    ``contents`` maps config paths to (base text, patched text) for exact section comparisons; without
    it (a static scan of a patch alone) the changed lines are inspected instead.
    """
    findings: list[Finding] = []
    by_path = {p: c for c in changes for p in c.paths}
    for c in changes:
        if c.symlink:
            findings += [Finding("symlink", p, action) for p in c.paths]
    for path in dict.fromkeys([*by_path, *extra_paths]):
        rule, detail = _path_rule(path, by_path.get(path), ctx, contents)
        if rule:
            findings.append(Finding(rule, path, action, detail))
    return findings


def unsafe(patch: str) -> list[Finding]:
    """``unsafe-path`` findings for ``patch`` (checked before it is applied; such a patch is refused)."""
    return [Finding("unsafe-path", p, "refused") for p in patches.unsafe_paths(patch)]


def scan_patch(patch: str, ctx: Context = Context(), action: str = "flagged") -> list[Finding]:
    """A static scan of a patch alone (no repository): what :func:`grading.grade` uses for raw logs."""
    return unsafe(patch) + scan(patches.parse(patch), (), ctx, None, action)


def _path_rule(
    path: str,
    change: FileChange | None,
    ctx: Context,
    contents: Mapping[str, tuple[str | None, str | None]] | None,
) -> tuple[str | None, str]:
    parts = path.split("/")
    name = parts[-1]
    if name == "conftest.py":
        return "conftest", ""
    if name in ("sitecustomize.py", "usercustomize.py") or name.endswith(".pth"):
        return "startup-hook", ""
    if any(p.endswith((".egg-info", ".dist-info")) for p in parts[:-1]):
        return "pytest-plugin", "package metadata (entry points)"
    if name in CONFIG_FILES:
        rule = _config_rule(path, change, (contents or {}).get(path), contents is None)
        if rule:
            return rule
    if _runs_in_command(path, ctx.test_command):
        return "test-runner", ""
    if _shadows(path, change):
        return "shadow-module", f"module {_module_name(path)!r}"
    if _in_test_folder(path, ctx) or any(fnmatch.fnmatch(path, g) for g in ctx.protected):
        return "test-files", ""
    return None, ""


def _config_rule(
    path: str, change: FileChange | None, texts: tuple[str | None, str | None] | None, static: bool
) -> tuple[str, str] | None:
    name = posixpath.basename(path)
    if name in PYTEST_FILES:
        return "pytest-config", name
    if texts is not None:
        old, new = texts
        if old == new:
            return None
        if _plugin_entry(old) != _plugin_entry(new):
            return "pytest-plugin", "pytest11 entry point"
        if name != "setup.py" and _pytest_section(name, old) != _pytest_section(name, new):
            return "pytest-config", "test options section"
        return None
    if not static or change is None:
        return None
    changed = "\n".join([*change.added_lines, *change.removed_lines])
    if "pytest11" in changed:
        return "pytest-plugin", "pytest11 entry point"
    if name != "setup.py" and (
        _PYTEST_OPTION.search(changed) or _PYTEST_OPTION.search("\n".join(change.context_lines))
    ):
        return "pytest-config", "test options (static scan)"
    return None


_PYTEST_OPTION = re.compile(
    r"^\s*\[[^\]]*pytest[^\]]*\]|^\s*(addopts|python_files|python_classes|python_functions|testpaths|"
    r"norecursedirs|required_plugins|minversion|filterwarnings|markers|xfail_strict|timeout|log_\w+|"
    r"doctest_\w+|junit_\w+|console_output_style|usefixtures|empty_parameter_set_mark)\b|^\s*-p\b",
    re.M,
)
"""A pytest section header or option line: changed, or in the context around the change (the change is
in the pytest section). A mention of pytest in another tool's list (isort's known_third_party) is not."""


def _plugin_entry(text: str | None) -> int:
    return (text or "").count("pytest11")


def _pytest_section(name: str, text: str | None) -> Any:
    """The pytest-relevant part of setup.cfg or pyproject.toml; a parse failure is its own value."""
    if text is None:
        return None
    try:
        if name == "pyproject.toml":
            tool = tomllib.loads(text).get("tool", {})
            return {k: v for k, v in tool.items() if k.startswith("pytest")}
        parser = configparser.RawConfigParser(strict=False, interpolation=None)
        parser.read_string(text)
        return {s: dict(parser.items(s)) for s in parser.sections() if s in ("tool:pytest", "pytest")}
    except (tomllib.TOMLDecodeError, configparser.Error) as e:
        return f"unparsable: {e}"


def _runs_in_command(path: str, command: str) -> bool:
    try:
        tokens = shlex.split(command, comments=False)
    except ValueError:
        tokens = command.split()
    return any(posixpath.normpath(t) == posixpath.normpath(path) for t in tokens if "/" in t)


def _module_name(path: str) -> str:
    parts = path.split("/")
    if parts[0] == "src" and len(parts) > 1:
        parts = parts[1:]
    return parts[0].removesuffix(".py")


def _shadows(path: str, change: FileChange | None) -> bool:
    if change is not None and not change.created:
        return False
    parts = path.split("/")
    top = parts[1:] if parts[0] == "src" and len(parts) > 1 else parts
    return ((len(top) == 1 and top[0].endswith(".py")) or len(top) > 1) and _module_name(path) in SHADOWED


def _in_test_folder(path: str, ctx: Context) -> bool:
    parts = path.split("/")
    if any(p in TEST_DIRS for p in parts[:-1]) or (len(parts) > 1 and parts[0] == "test"):
        return True
    if _TEST_NAME.match(parts[-1]):
        return True
    folders = {posixpath.dirname(f) for f in ctx.test_files} - {""}
    return any(path.startswith(f + "/") for f in folders)
