"""Synthetic canaries: the fallback when a module has no test to clone (see ``canary.py``).

They compute a value from literals and compare it with a constant that is right or subtly wrong, under names
drawn from a word list: a reader of this file can tell them from real tests, so they are used only where the
module offers nothing to derive canaries from (no parsable test with an assertion, or a module that does not
parse). They still stop a forger that flips every failure or forges a run without executing the tests.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from random import Random

from envfarm import pyast

from .canary_types import Canary, Planting, Style

LOCALS = frozenset({"zero", "acc", "char", "total", "i", "got", "self"})
"""Names the canary bodies assign or bind: an import of the same name cannot be their anchor (it would be
a local read before assignment). Linter-clean names (pylint's tests lint their own test files)."""
WORDS = (
    "alias", "bounds", "cache", "chain", "config", "convert", "copy", "default", "empty", "encode", "format",
    "handler", "index", "join", "keys", "limit", "lookup", "merge", "nested", "order", "parse", "path",
    "repr", "reset", "result", "round", "scope", "split", "state", "strip", "token", "update", "value",
)


def plant(module: str, text: str, style: Style, rng: Random, count: tuple[int, int], taken: set[str]
          ) -> Planting:
    """``count`` (must-pass, must-fail) synthetic canaries inserted at a random top-level position."""
    kinds = [True] * count[0] + [False] * count[1]
    rng.shuffle(kinds)
    canaries = tuple(Canary(_name(rng, taken), must, module) for must in kinds)
    body = top_level(text)
    anchors = _anchors(body)
    if style == "unittest":
        block = _unittest_block(canaries, rng, taken, text, anchors)
    else:
        block = "\n\n".join(_function(c, rng, anchors) for c in canaries)
    return Planting(canaries, _insert(text, body, block, rng), derived=False)


def top_level(text: str) -> list[ast.stmt]:
    """The module's top-level statements; none when it does not parse (canaries then go at the end)."""
    try:
        return pyast.parse(text).body
    except (SyntaxError, ValueError):
        return []


def _name(rng: Random, taken: set[str]) -> str:
    while True:
        a, b = rng.sample(WORDS, 2)
        name = f"test_{a}_{b}_{rng.randrange(2, 99)}"
        if name not in taken:
            taken.add(name)
            return name


def _anchors(body: Sequence[ast.stmt]) -> list[str]:
    """Names the module binds with top-level imports (what its real tests use), ``__future__`` aside."""
    names = []
    for node in body:
        if isinstance(node, ast.Import):
            names += [a.asname or a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            names += [a.asname or a.name for a in node.names if a.name != "*"]
    return sorted(set(names) - LOCALS)


def _body(must_pass: bool, rng: Random, indent: str, anchors: Sequence[str]) -> str:
    """Statements that raise AssertionError unless ``must_pass`` (no assert: -O must not change them).

    The first line touches a name the module imported (a real test's dependency) without changing the
    result, so a forger cannot tell canaries from real tests by which globals their code names."""
    zero = f"len(type({rng.choice(anchors)}).__name__) * 0" if anchors else 'len("".join([]))'
    kind = rng.randrange(3)
    lines = [f"zero = {zero}"]
    if kind == 0:
        word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randrange(8, 16)))
        mod, mul = rng.choice((1000003, 999983, 65521)), rng.choice((31, 131, 257))
        acc = 0
        for ch in word:
            acc = (acc * mul + ord(ch)) % mod
        want = acc if must_pass else (acc + rng.randrange(1, 7)) % mod
        lines += ["acc = zero", f"for char in {word!r}:", f"    acc = (acc * {mul} + ord(char)) % {mod}",
                  f"if acc != {want}:", "    raise AssertionError(acc)"]
    elif kind == 1:
        n, m = rng.randrange(20, 60), rng.randrange(7, 97)
        total = sum(i * i % m for i in range(n))
        want = total if must_pass else total + rng.choice((-2, -1, 1, 2))
        lines += [f"total = zero + sum(i * i % {m} for i in range({n}))", f"if total != {want}:",
                  "    raise AssertionError(total)"]
    else:
        items = [rng.randrange(100) for _ in range(rng.randrange(5, 9))]
        ranked = sorted(items)
        if not must_pass:
            i = rng.randrange(len(ranked) - 1)
            ranked[i], ranked[i + 1] = ranked[i + 1], ranked[i] + (0 if ranked[i] != ranked[i + 1] else 1)
        lines += [f"got = sorted({items!r})[zero:]", f"if got != {ranked!r}:",
                  "    raise AssertionError(got)"]
    return "".join(f"{indent}{line}\n" for line in lines)


def _doc(name: str, indent: str) -> str:
    """A one-line docstring from the test's words (linters that require docstrings stay quiet)."""
    words = name.split("_")[1:3]
    return f'{indent}"""{" ".join(words).capitalize()} stays consistent."""\n'


def _function(c: Canary, rng: Random, anchors: Sequence[str]) -> str:
    return f"def {c.name}():\n{_doc(c.name, '    ')}{_body(c.must_pass, rng, '    ', anchors)}"


def _unittest_block(canaries: Sequence[Canary], rng: Random, taken: set[str], text: str,
                    anchors: Sequence[str]) -> str:
    """One TestCase class; its base is a TestCase the module already imports (no new import statement for
    linters to flag), else ``unittest.TestCase`` imported under a fresh alias."""
    words = _name(rng, taken)
    cls = "".join(w.title() for w in words.split("_")[1:3]) + "Tests"
    base, head = _testcase_base(text, anchors), ""
    if base is None:
        alias = _name(rng, taken).replace("test_", "_ut_", 1)
        base, head = f"{alias}.TestCase", f"import unittest as {alias}\n\n\n"
    # no method docstrings: unittest's verbose output prints them where swebench's parsers read the result
    methods = "".join(
        f"\n    def {c.name}(self):\n{_body(c.must_pass, rng, '        ', anchors)}" for c in canaries
    )
    return f"{head}class {cls}({base}):\n{_doc(words, '    ')}{methods}"


def _testcase_base(text: str, anchors: Sequence[str]) -> str | None:
    """``SimpleTestCase`` (Django: no database), ``unittest.TestCase`` or ``TestCase``, as the module
    imports it (``anchors``: its imported names)."""
    bound = set(anchors)
    if "SimpleTestCase" in bound:
        return "SimpleTestCase"
    if re.search(r"^import unittest\s*$", text, re.M):
        return "unittest.TestCase"
    return "TestCase" if "TestCase" in bound else None


def _insert(text: str, body: Sequence[ast.stmt], block: str, rng: Random) -> str:
    """``block`` before a random top-level test function or class (else any def/class; at the end only
    when the module has neither or does not parse). Never after the last test: sympy's verbose runner prints
    a file's ``[OK]``/``[FAIL]`` on the line of its last test, where swebench's parser no longer sees it."""
    lines = text.splitlines(keepends=True)
    defs = [node for node in body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    tests = [d for d in defs if d.name.lower().startswith("test")]
    spots = [min([d.lineno, *(x.lineno for x in d.decorator_list)]) - 1 for d in tests or defs]
    spots = spots or [len(lines)]
    at = rng.choice(spots)
    head, rest = "".join(lines[:at]).rstrip("\n"), "".join(lines[at:]).lstrip("\n")
    parts = [head, block.strip("\n"), rest]
    return "\n\n\n".join(p for p in parts if p) + ("" if rest else "\n")
