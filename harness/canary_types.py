"""The records canary planting produces and consumes (``canary.py``), apart so its helpers can share them."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Literal

Style = Literal["function", "unittest", "sympy"]
"""How the runner collects tests: pytest (functions and ``Test*`` classes), unittest classes only, sympy's
bin/test (module functions; a file's result printed on its last test's line)."""


@dataclass(frozen=True)
class Canary:
    """One planted test."""

    name: str
    """Function (or method) name, unique in its module."""
    must_pass: bool
    module: str
    """Repo-relative path of the test module it was planted in."""


@dataclass(frozen=True)
class Planting:
    """Canaries to plant in one module, and the module's new text."""

    canaries: tuple[Canary, ...]
    text: str
    derived: bool = True
    """True: cloned from the module's own tests; False: synthetic (the module had no test to clone)."""
    hidden: bool = False
    """The must-fail canaries are copies of tests test_patch adds (absent from the repository); False: of
    tests the repository has, whose copies a reader of the repository can single out."""


TestKey = tuple[str | None, str | None, str]
"""(module path or None, class name or None, function name) as a test id names them."""


@dataclass(frozen=True)
class Known:
    """What the grader knows of the row's tests: canaries are cloned only from tests known to pass."""

    passing: frozenset[TestKey] = frozenset()
    """FAIL_TO_PASS and PASS_TO_PASS tests (they pass with the reference fix)."""
    failing: frozenset[TestKey] = frozenset()
    """FAIL_TO_PASS tests (they fail without a fix: a forger has to forge them)."""
    added: frozenset[tuple[str, str]] = frozenset()
    """(module, function name) of every test function test_patch adds (absent from the repository)."""
    names: frozenset[str] = frozenset()
    """Every test name the lists mention: canaries never take one."""

    @classmethod
    def from_row(cls, fail_to_pass: tuple[str, ...], pass_to_pass: tuple[str, ...], test_patch: str
                 ) -> Known:
        failing = frozenset(k for k in map(test_key, fail_to_pass) if k)
        passing = failing | frozenset(k for k in map(test_key, pass_to_pass) if k)
        return cls(passing, failing, added_tests(test_patch), frozenset(k[2] for k in passing))

    def listed(self, keys: frozenset[TestKey], module: str, cls: str | None, name: str) -> bool:
        """Whether the test ``name`` (in class ``cls``) of ``module`` is among ``keys``."""
        return any(k in keys for k in ((module, cls, name), (None, cls, name))) or (
            cls is None and (None, None, name) in keys)


_DJANGO = re.compile(r"^(\w+) \(([\w.]+)\)")


def test_key(test_id: str) -> TestKey | None:
    """The key of a test id as swebench's parsers write them: ``path::Class::name[param]`` (pytest),
    ``name (dotted.module.Class)`` (Django), a bare ``name`` (sympy)."""
    if "::" in test_id:
        parts = test_id.split("::")
        name = re.sub(r"\[.*$", "", parts[-1])
        return parts[0], (parts[-2] if len(parts) > 2 else None), name
    if m := _DJANGO.match(test_id):
        return None, m.group(2).rsplit(".", 1)[-1], m.group(1)
    if re.fullmatch(r"\w+", test_id):
        return None, None, test_id
    return None


_DEF = re.compile(r"^([+-])\s*(?:async\s+)?def\s+(\w+)\s*\(")


def added_tests(test_patch: str) -> frozenset[tuple[str, str]]:
    """(path, name) of the functions a diff defines that it does not also remove (new, not rewritten)."""
    plus: set[tuple[str, str]] = set()
    minus: set[tuple[str, str]] = set()
    path = ""
    for line in test_patch.splitlines():
        if line.startswith("+++ "):
            path = line[4:].strip().removeprefix("b/")
        elif line.startswith("--- "):
            continue
        elif m := _DEF.match(line):
            (plus if m.group(1) == "+" else minus).add((path, m.group(2)))
    return frozenset(plus - minus)


Edit = tuple[int, int, int, int, str]
"""(line, col, end line, end col, new text): a span of the module (1-based lines, UTF-8 byte columns)."""


@dataclass(frozen=True)
class Source:
    """A test that may be cloned."""

    node: ast.FunctionDef
    cls: ast.ClassDef | None
    tier: int
    """0 best: added by test_patch and FAIL_TO_PASS; 1 added; 2 FAIL_TO_PASS; 3 other passing tests."""
    sites: tuple[tuple[Edit, ...], ...]
    """Ways to make it fail (each a set of edits), best kind first."""
    copyable: bool
    """An unchanged copy passes like the original (it does not look at its own name)."""
