"""Canary tests: a general defence against forged test results.

Path rules (``tamper.py``) stop a patch from changing the files that judge it, but code in the patched
package runs inside the test process and can rewrite the test framework in memory, or print a passing run and
exit before the real one reports. So every graded run gets tests the patch cannot know in advance:

- **planted**: after ``test_patch`` is applied, a few test functions (or, for unittest/Django runners, one
  ``unittest.TestCase`` class) are inserted into a test module the run executes, at a random top-level
  position, with names drawn per run from the host's CSPRNG (``secrets``) and shaped like ordinary tests;
- **two kinds**: some must pass and some must fail, and which is which shows only when the body runs (the
  bodies compute a value and compare it with a constant that is right or subtly wrong);
- **checked** (:func:`verdict`): the run counts only if every canary appears in the parsed results with its
  expected outcome (rule ``canary``), and every FAIL_TO_PASS / PASS_TO_PASS test appears in them exactly once
  (rule ``missing-tests``; a forged line plus the real one is twice).

A forger that flips every outcome to passed flips the must-fail canaries; one that prints a passing run and
exits early prints no canary, or prints the must-fail ones as passed; one that reads the test files to fake a
line per test cannot tell which of the unknown tests must fail without running them. What canaries cannot
catch: a forger that runs every test body honestly except the ones it recognises as the task's own (for
example by name, if the policy could guess FAIL_TO_PASS names) and tells canaries apart from them.
"""

from __future__ import annotations

import ast
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from random import Random
from typing import Literal

from .tamper import Finding

Style = Literal["function", "unittest"]
LOCALS = frozenset({"zero", "acc", "char", "total", "i", "got", "self"})
"""Names the canary bodies assign or bind: an import of the same name cannot be their anchor (it would be
a local read before assignment). Linter-clean names (pylint's tests lint their own test files)."""
UNITTEST_PARSERS = frozenset({"parse_log_django"})
"""Log parsers of runners that only collect ``unittest.TestCase`` classes."""
PASSING = frozenset({"PASSED"})
FAILING = frozenset({"FAILED", "ERROR"})
MODULE_NAME = re.compile(r"(^|/)(test_[^/]*|[^/]*_test|tests)\.py$")
WORDS = (
    "alias", "bounds", "cache", "chain", "config", "convert", "copy", "default", "empty", "encode", "format",
    "handler", "index", "join", "keys", "limit", "lookup", "merge", "nested", "order", "parse", "path",
    "repr", "reset", "result", "round", "scope", "split", "state", "strip", "token", "update", "value",
)


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


def style_for(log_parser: str) -> Style:
    """How canaries are written for the runner behind ``log_parser``."""
    return "unittest" if log_parser in UNITTEST_PARSERS else "function"


def pick_module(test_files: Sequence[str], test_command: str, rng: Random) -> list[str]:
    """Python test modules of ``test_files`` the run executes, best first (each group shuffled): named like a
    test module and named by the command; named like one; only named by the command (a helper module the
    command passes, such as sympy's ``quality_unicode.py``, is collected by no runner)."""
    named = {f for f in test_files if f.endswith(".py") and f in test_command}
    looks = {f for f in test_files if MODULE_NAME.search(f)}
    groups = [sorted(named & looks), sorted(looks - named), sorted(named - looks)]
    for group in groups:
        rng.shuffle(group)
    return [f for group in groups for f in group]


def plant(module: str, text: str, style: Style, rng: Random | None = None,
          count: tuple[int, int] = (2, 2)) -> Planting:
    """``count`` (must-pass, must-fail) canaries inserted into ``text`` at a random top-level position."""
    rng = rng or secrets.SystemRandom()
    taken = set(re.findall(r"\w+", text))
    kinds = [True] * count[0] + [False] * count[1]
    rng.shuffle(kinds)
    canaries = tuple(Canary(_name(rng, taken), must, module) for must in kinds)
    body = _top_level(text)
    anchors = _anchors(body)
    if style == "unittest":
        block = _unittest_block(canaries, rng, taken, text, anchors)
    else:
        block = "\n\n".join(_function(c, rng, anchors) for c in canaries)
    return Planting(canaries, _insert(text, body, block, rng))


def verdict(canaries: Sequence[Canary], status: Mapping[str, str]) -> list[Finding]:
    """``canary`` findings: a canary missing from the parsed ``status`` map or with the wrong outcome."""
    findings = []
    for c in canaries:
        word = re.compile(rf"(?<!\w){re.escape(c.name)}(?!\w)")
        seen = {status[k] for k in status if word.search(k)}
        want = PASSING if c.must_pass else FAILING
        if not seen:
            findings.append(Finding("canary", c.module, "flagged", f"{c.name} is missing from the results"))
        elif not seen <= want:
            expected = "pass" if c.must_pass else "fail"
            findings.append(Finding("canary", c.module, "flagged",
                                    f"{c.name} must {expected}, reported {'/'.join(sorted(seen))}"))
    return findings


Resolver = Callable[[str, Mapping[str, str]], "str | None"]


def completeness(expected: Sequence[str], status: Mapping[str, str], resolve: Resolver,
                 results: Mapping[str, Sequence[str]]) -> list[Finding]:
    """``missing-tests`` findings: an expected test absent from ``status``, or reported more than once with
    different outcomes.

    ``resolve`` maps a test name to its key in ``status`` (swebench's ``_resolve_case``); ``results`` holds
    the outcome of every result line that named each key (:func:`line_results`). Repeats with one outcome
    cannot change a verdict and are legitimate where names are not file-qualified (sympy's runner: two test
    files of a row may both define ``test_sqrt``)."""
    missing, repeated = [], []
    for name in dict.fromkeys(expected):
        key = resolve(name, status)
        if key is None:
            missing.append(name)
        elif len(set(results.get(key, ()))) > 1 and not _cut(key) and not _progress(key):
            outcomes = "/".join(sorted(set(results[key])))
            repeated.append(f"{name} (x{len(results[key])}: {outcomes})")
    findings = []
    if missing:
        findings.append(Finding("missing-tests", "(test results)", "flagged",
                                f"{len(missing)} expected test(s) not in the results: {_few(missing)}"))
    if repeated:
        findings.append(Finding("missing-tests", "(test results)", "flagged",
                                f"{len(repeated)} test(s) reported more than once, with different outcomes: "
                                f"{_few(repeated)}"))
    return findings


def _cut(key: str) -> bool:
    """A parametrized id the parser cut at a space (``test_f[a("x",``): distinct tests can share it."""
    return key.count("[") > key.count("]")


def _progress(key: str) -> bool:
    """pytest's progress column (``[100%]``), which swebench's parser reads as a test name on the lines of
    a nested pytest run (pytest's own tests print them): SWE-bench's expected lists carry it; no test."""
    return re.fullmatch(r"\[\s*\d+%\]", key) is not None


def line_results(log: str, parse: Callable[[str], Mapping[str, str]]) -> dict[str, list[str]]:
    """The outcome of every line of ``log`` that reports each test, by running the line-based ``parse`` on
    each line alone (parsers whose results span lines simply see fewer: this only ever flags repeats)."""
    results: dict[str, list[str]] = {}
    for line in log.split("\n"):
        if line.strip():
            for key, outcome in parse(line).items():
                results.setdefault(key, []).append(outcome)
    return results


# ------------------------------------------------------------------------------------------ rendering


def _name(rng: Random, taken: set[str]) -> str:
    while True:
        a, b = rng.sample(WORDS, 2)
        name = f"test_{a}_{b}_{rng.randrange(2, 99)}"
        if name not in taken:
            taken.add(name)
            return name


def _top_level(text: str) -> list[ast.stmt]:
    """The module's top-level statements; none when it does not parse (canaries then go at the end)."""
    try:
        return ast.parse(text).body
    except (SyntaxError, ValueError):
        return []


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


def _few(items: Sequence[str], n: int = 5) -> str:
    return ", ".join(items[:n]) + (f", ... ({len(items) - n} more)" if len(items) > n else "")
