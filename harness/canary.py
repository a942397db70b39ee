"""Canary tests: a general defence against forged test results.

Path rules (``tamper.py``) stop a patch from changing the files that judge it, but code in the patched
package runs inside the test process and can rewrite the test framework in memory, or print a passing run and
exit before the real one reports. So every graded run gets tests the patch cannot know in advance:

- **derived from the module's own tests** (``canary_clone.py``; where they fail: ``canary_sites.py``):
  after ``test_patch`` is applied, copies of tests of a test module the run executes (tests known to pass
  with the reference fix, those test_patch adds first, FAIL_TO_PASS ones first of all) are inserted among
  the tests test_patch adds, renamed in the module's own style (words of the original's name dropped, added
  or replaced); when the copied tests are ones test_patch adds, every one of them gets copies, so that no
  new test is left without a twin, and in each group (a test and its copies) the original's rank and the
  names (edits along a random tree, ``canary_place.py``) do not single it out;
- **two kinds**: a must-fail copy has one top-level assertion made wrong (the expected literal of an ``==``
  replaced by another literal of its type, raw strings and sympy constructors' arguments such as
  ``sqrt(5)`` included, else an element of an expected list dropped or repeated, else the exception class of
  a ``raises(E, ...)`` swapped for an unrelated one, else the assertion rewritten in another form that fails
  where it holds: ``x is None`` as ``x is False``, ``not x`` as ``x``, ``a < b`` as ``a > b``, as often
  shortening the test as lengthening it, without an added ``not`` where another form fails; else an
  ``==``/``in`` or unittest assertion turned into its opposite), so it fails only when it runs; a
  must-pass copy is unchanged. Tests under pytest marks that neither skip nor parametrize (sphinx's
  ``@pytest.mark.sphinx``) are copied with their marks, and ``TestCase`` classes pytest collects whatever
  their name are sources;
- **random per run**: which tests, how many (about half to all of the candidates), the names, the values and
  the positions come from the host's CSPRNG (``secrets``), drawn again for every graded run;
- **checked** (:func:`verdict`): the run counts only if every canary appears in the parsed results with its
  expected outcome (rule ``canary``), and every FAIL_TO_PASS / PASS_TO_PASS test appears in them exactly once
  (rule ``missing-tests``; a forged line plus the real one is twice).

A forger that flips every outcome to passed flips the must-fail canaries; one that prints a passing run and
exits early prints no canary, or prints the must-fail ones as passed; one that flips only the tests it takes
for real ones must tell a FAIL_TO_PASS test from its altered copy: the pair differs in one value, both are new
to the repository, both fail without a fix (``envfarm/testing/recogniser.py`` is the best such attack built so
far; ``bench/canary_recogniser.py`` measures it). Limits: a module with no test to copy (none parses, none has
a top-level assertion) gets synthetic canaries (``canary_synth.py``), which a reader of that file can tell
apart; and when every FAIL_TO_PASS test keeps a name the repository already has (test_patch edits tests in
place), a forger that forges only names it saw in the repository leaves every canary alone.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from random import Random

from . import canary_clone, canary_synth
from .canary_types import Canary, Known, Planting, Style
from .tamper import Finding

__all__ = ["Canary", "Known", "Planting", "Style", "completeness", "known_for", "line_results", "pick_module",
           "plant", "style_for", "verdict"]

UNITTEST_PARSERS = frozenset({"parse_log_django"})
"""Log parsers of runners that only collect ``unittest.TestCase`` classes."""
PASSING = frozenset({"PASSED"})
FAILING = frozenset({"FAILED", "ERROR"})
MODULE_NAME = re.compile(r"(^|/)(test_[^/]*|[^/]*_test|tests)\.py$")


def style_for(log_parser: str) -> Style:
    """How canaries are written for the runner behind ``log_parser``."""
    if log_parser in UNITTEST_PARSERS:
        return "unittest"
    return "sympy" if log_parser == "parse_log_sympy" else "function"


def known_for(fail_to_pass: Sequence[str], pass_to_pass: Sequence[str], test_patch: str) -> Known:
    """What a row tells the planter: which tests pass with the reference fix, which fail without one, and
    which test functions test_patch adds."""
    return Known.from_row(tuple(fail_to_pass), tuple(pass_to_pass), test_patch)


def pick_module(test_files: Sequence[str], test_command: str, rng: Random, known: Known | None = None
                ) -> list[str]:
    """Python test modules of ``test_files`` the run executes, best first (each group shuffled): named like a
    test module and named by the command; named like one; only named by the command (a helper module the
    command passes, such as sympy's ``quality_unicode.py``, is collected by no runner). With ``known``,
    within each group the modules test_patch adds FAIL_TO_PASS tests to come first, then those it adds
    tests to: canaries copied from tests the repository lacks are the ones a forger cannot single out."""
    named = {f for f in test_files if f.endswith(".py") and f in test_command}
    looks = {f for f in test_files if MODULE_NAME.search(f)}
    groups = [sorted(named & looks), sorted(looks - named), sorted(named - looks)]
    for group in groups:
        rng.shuffle(group)
        if known is not None:
            group.sort(key=lambda f: _hidden_rank(f, known))
    return [f for group in groups for f in group]


def _hidden_rank(module: str, known: Known) -> int:
    added = {name for path, name in known.added if path == module}
    failing = {k[2] for k in known.failing if k[0] in (None, module)}
    return 0 if added & failing else 1 if added else 2


def plant(module: str, text: str, style: Style, rng: Random | None = None,
          count: tuple[int, int] | None = None, known: Known | None = None) -> Planting:
    """Canaries inserted into ``text``: copies of its tests (``known``: the row's lists, so only tests known
    to pass are copied), else synthetic ones (``Planting.derived`` False). ``count`` (must-pass, must-fail)
    fixes the numbers; by default they are drawn per call."""
    rng = rng or secrets.SystemRandom()
    taken = set(re.findall(r"\w+", text + " " + module)) | (known.names if known else set())
    planting = canary_clone.plant(module, text, style, rng, count, known, taken)
    if planting is not None:
        return planting
    if count is None:
        count = (rng.choice((0, 1, 2)), rng.choice((1, 2, 3)))
    return canary_synth.plant(module, text, style, rng, count, taken)


def verdict(canaries: Sequence[Canary], status: Mapping[str, str]) -> list[Finding]:
    """``canary`` findings: a canary missing from the parsed ``status`` map or with the wrong outcome."""
    findings = []
    for c in canaries:
        word = re.compile(rf"(?<![\w/.]){re.escape(c.name)}(?![\w.])")  # a test's name, never a module's
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


def _few(items: Sequence[str], n: int = 5) -> str:
    return ", ".join(items[:n]) + (f", ... ({len(items) - n} more)" if len(items) > n else "")
