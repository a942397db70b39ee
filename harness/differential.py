"""The differential check: every FAIL_TO_PASS test the run claims fixed has perturbed twins that must fail.

Canary tests (``canary.py``) catch a forger that flips every failure, but they are tests of their own, so a
forger that has read the grader can try to tell them apart from the task's tests. This check needs no such
ignorance. In every graded run, after ``test_patch`` is applied (and after the canaries are planted), up to
:data:`MAX_TWINS` FAIL_TO_PASS tests (picked at random, with the host's CSPRNG), then as many of the
PASS_TO_PASS tests test_patch adds as the limit allows, are each replaced, in place, by copies under fresh
names in the module's style (edits of the test's name along a random tree, as
canaries are named: ``canary_place.group_names``), in random order:

- the **honest** copy: the test exactly as written; the host renames it back to the original name in the
  captured log before grading, so swebench's grading sees the test it expects;
- up to :data:`DECOYS` **decoys**: the same test made wrong at one place a must-fail canary could be
  (``canary_sites.failure_sites``), so that each fails whenever the honest copy passes. Best first: the
  expected literal of an assertion, one value per decoy, chosen as a canary's values are (values the module
  uses, about as common as the original; ``canary_clone.choose_value``), at every expected literal of
  that value where those are all its uses in the test (``canary_clone.value_sites``: a value changed at
  one of its uses alone is used once more in the honest copy than in the decoy), the last one on a line
  test_patch added when there is one; where canaries were cloned from the test, at the literal (or
  literals alike) where they differ from it, with values none of them has; a literal of a test test_patch
  edits in place only where the repository's version of the test is as far from each decoy as from the
  honest copy (a reader compares them with it); with a decoy pool (``decoy_pool.py``, opt-in), up to
  three values gold was seen to fail at another literal of the test; else one decoy with the assertion in
  another wrong form (``is None`` as ``is False``, ``<`` as ``>``, an exception class swapped), one
  without an added ``not`` first; else one negated; else a failing assertion appended. An unchanged copy
  of the test (a must-pass canary) is twinned with the same values, so no value is shared by more copies
  than the others.

Verdict (:func:`verdict`): a decoy reported passed while its honest twin passed, or a decoy missing from the
results while its twin passed, proves the results forged: the instance is not resolved and the report says
why (``forgery_check``). A patch that fixes nothing and flips outcomes in memory must flip the honest copy
and leave every decoy failing; all run the same code, and with no fix they fail alike, so which one to
flip depends on knowing the right literal of a test the forger has never seen: one guess in ``k + 1`` per
test with ``k`` decoys (``bench/canary_recogniser.py`` measures how often the best recogniser wins both
checks).

There is one run, so nothing inside it can tell a "checking" run from a "graded" one: same command, same
environment, same paths, no marker; ``test_patch`` itself is removed from the sandbox once applied (it
would show the original literals). Cost: each twinned test runs once more per decoy, nothing else (no
second sandbox).

Limits: a decoy with a negated or appended assertion is visible to a forger that compares the copies'
source (values are not: any of them may be the original). So is a decoy whose edited assertion comes
before the one the unfixed code fails: run without a fix, the honest copy gets past the edited line and
its decoys do not, and a forger that runs the test itself sees which one. A test that cannot run twice in
one test run (it creates a fixed path the run shares, without ``exist_ok``) fails whichever copy runs
second, so gold is graded unresolved when a decoy runs before the honest copy. Tests that cannot be located in
test_patch's Python files (runner-generated names) get no twin; when no FAIL_TO_PASS test can be twinned
the check says it was skipped. PASS_TO_PASS tests the repository has are not twinned (a reader of the
repository knows their values; a patch that breaks one and flips it is left to the canaries). The new
ones are twinned so that no test test_patch adds stands alone: a reader takes a new test without copies for
a real one, and a canary copied from it is singled out against it. Their twins check only a forger that
reads source: run without a fix, a PASS_TO_PASS test's honest copy passes and its decoys fail, which a
forger that watches outcomes sees (it need not forge them either).
"""

from __future__ import annotations

import ast
import difflib
import re
import secrets
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from random import Random

from envfarm import pyast

from .canary_clone import choose_value, is_literal, negating, used_alike, value_sites
from .canary_place import group_names, vocabulary
from .canary_sites import FLIPS, failure_kinds, func_name, literal_site
from .canary_types import Edit as SiteEdit
from .canary_types import added_tests
from .decoy_pool import PROBE, PROBE_SITES, VALIDATED, PoolSite

NAME = "differential"
MAX_TWINS = 8
"""Tests twinned per run, at most (each costs one more run of that test per decoy)."""
DECOYS = 3
"""Decoys per twinned test where its expected literal has as many other values (a bool has one): a forger
that cannot tell the honest copy from its decoys picks it one time in ``DECOYS + 1`` per test."""
PASSING = frozenset({"PASSED", "XPASS"})
FAILING = frozenset({"FAILED", "ERROR"})
_DJANGO = re.compile(r"^(\w+) \(([\w.]+)\)")
OWN_STATE = frozenset({"request", "pytester", "testdir", "tester"})
"""Fixtures through which a test sees its own name or output: such a test gets no twin."""
_OWN_NAME = re.compile(r"_testMethodName|\bself\.id\(\)|\brequest\.node\b")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
"""A terminal escape (colours: ``pytest --color yes``, which some projects' tox.ini sets)."""
_ASSERT_METHODS = frozenset({*FLIPS, "assertEqual", "assertEquals", "assertNotEqual"})
"""unittest assertions (the canaries' flip table, with equality)."""
_EXPECTING = frozenset({"raises", "warns", "deprecated_call", "assertRaises", "assertRaisesRegex",
                        "assertWarns", "assertWarnsRegex"})
"""Context managers that fail the test unless their block raises or warns."""


@dataclass(frozen=True)
class Target:
    """Where a FAIL_TO_PASS test is defined, as far as its name tells."""

    func: str
    cls: str | None = None
    path: str | None = None
    """Repo-relative file (pytest ids name it; Django and sympy names do not)."""


@dataclass(frozen=True)
class Twin:
    """One twinned test: its honest copy and its decoy, both under fresh names."""

    test: str
    """The test function's own name."""
    module: str
    honest: str
    decoy: str
    how: str
    """The decoy's perturbation: "literal", "validated" (from the pool), "swapped", "negated" or
    "appended"; "probe": a candidate tried for the pool, never judged (``decoy_pool.py``)."""
    edit: str = ""
    """A probe's edit (``decoy_pool.PoolSite.key``, one value)."""


@dataclass(frozen=True)
class Planting:
    text: str
    twins: tuple[Twin, ...]


def target(name: str) -> Target:
    """The function, class and file an expected test name points at (pytest, Django or plain names)."""
    head = name.split("[", 1)[0]
    if "::" in head:
        parts = head.split("::")
        return Target(parts[-1], parts[-2] if len(parts) > 2 else None, parts[0])
    if m := _DJANGO.match(name):
        return Target(m[1], m[2].rsplit(".", 1)[-1])
    return Target(head.split()[0] if head.split() else head)


def targets_in(module: str, names: Iterable[str]) -> list[tuple[str | None, str]]:
    """(class, function) of the expected tests that may live in ``module`` (a pytest id naming another
    file does not)."""
    found = []
    for name in names:
        t = target(name)
        if t.path is not None and not (module == t.path or module.endswith("/" + t.path)):
            continue
        found.append((t.cls, t.func))
    return list(dict.fromkeys(found))


def plant(module: str, text: str, wanted: Sequence[tuple[str | None, str]], added: Iterable[str] = (),
          rng: Random | None = None, limit: int = MAX_TWINS, reserved: Iterable[str] = (),
          then: Sequence[tuple[str | None, str]] = (), before: str | None = None, *,
          pool: Sequence[PoolSite] = (), probe: bool = False) -> Planting:
    """Replace up to ``limit`` tests of ``wanted`` (picked at random), then of ``then`` while the limit
    allows, found in ``text`` by their honest copy and their decoys, in random order. ``added``: the lines
    test_patch added to the module (their assertions are perturbed first); ``reserved``: names the copies
    may not take (the words of the run's other test files, whose results share the log). A test with exact
    copies under other names (must-pass canaries) has each copy twinned with the same decoy values:
    otherwise the value two copies share would be the honest one. ``before``: the module as the repository
    has it (a test test_patch edits in place gets decoys only where its old version is as far from each of
    them as from the honest copy: the copy nearest to the old version would be the honest one). ``pool``:
    the module's sites gold was seen to fail, drawn on where a test has no expected literal; ``probe``:
    also plant candidates for the pool (``decoy_pool.py``)."""
    rng = rng or secrets.SystemRandom()
    try:
        tree = pyast.parse(text)
    except (SyntaxError, ValueError):
        return Planting(text, ())
    lines = text.splitlines(keepends=True)
    added_set = {line.strip() for line in added if line.strip()}
    taken = set(re.findall(r"\w+", text)) | set(reserved)
    funcs = [node for node, _ in _functions(tree)]
    parents = {id(node): parent for node, parent in _functions(tree)}
    old = old_versions(before)
    spots = []
    for keys in (set(wanted), set(then) - set(wanted)):
        found = [node for node, parent in _functions(tree) if (parent, node.name) in keys]
        rng.shuffle(found)
        spots += found
    made: list[tuple[tuple[Twin, ...], int, int, str]] = []
    done: set[int] = set()
    codes: set[tuple[str, ...]] | None = None  # of every function, once a test is twinnable
    for node in spots:
        if len(made) >= limit or id(node) in done or not _twinnable(node, lines):
            continue
        codes = codes if codes is not None else {tokens(f) for f in funcs}
        literal, other = failure_kinds(node, lines, tree)  # type: ignore[arg-type]
        forms = _unlike(node, codes, lines, other)
        sites = literal or forms  # _unlike keeps every literal site
        cls = parents[id(node)]
        fair = _fair_to(old.get((cls, node.name)), node, lines)
        mine = [s for s in pool if (s.cls, s.func) == (cls, node.name)]
        decoys = (_shared_decoys(node, funcs, lines, sites, tree, rng, fair)
                  or _decoys(node, lines, sites, forms, tree, added_set, rng, fair, mine))
        if decoys is None:
            continue
        variants = [(edits, decoys[1], "") for edits in decoys[0]]
        probes = []
        if probe:
            probes = _probes(node, cls, lines, tree, variants, _edited(old, cls, node, added_set))
        copies = [n for n in funcs if n is not node and id(n) not in done and _same_code(n, node, lines)]
        group = [node, *copies]
        twinned = [_twin(module, n, node, lines, tree, variants + (probes if n is node else []), taken, rng)
                   for n in group]
        trial = list(lines)
        for _, start, end, block in sorted(twinned, key=lambda m: -m[1]):
            trial[start:end] = [block]
        try:
            pyast.parse("".join(trial))
        except (SyntaxError, ValueError):
            continue
        made += twinned
        done |= {id(n) for n in group}
    for _, start, end, block in sorted(made, key=lambda m: -m[1]):
        lines[start:end] = [block]
    return Planting("".join(lines), tuple(t for m in sorted(made, key=lambda m: m[1]) for t in m[0]))


def targets(module: str, fail_to_pass: Sequence[str], pass_to_pass: Sequence[str], test_patch: str
            ) -> tuple[list[tuple[str | None, str]], list[tuple[str | None, str]]]:
    """(class, function) of the FAIL_TO_PASS tests that may live in ``module``, and of the PASS_TO_PASS tests
    test_patch adds to it (twinned while the limit allows: a new test left alone is real to a reader, and
    the canaries copied from it are singled out against it)."""
    new = {name for path, name in added_tests(test_patch) if path == module}
    return targets_in(module, fail_to_pass), [k for k in targets_in(module, pass_to_pass) if k[1] in new]


def twinnable(module: str, text: str, fail_to_pass: Sequence[str], test_patch: str,
              before: str | None = None) -> bool:
    """Whether :func:`plant` twins at least one FAIL_TO_PASS test of ``module`` (a dry run; ``before`` as
    :func:`plant` takes it)."""
    wanted = targets_in(module, fail_to_pass)
    added = added_lines(test_patch, module)
    return bool(wanted) and bool(plant(module, text, wanted, added, Random(0), limit=1, before=before).twins)


def rename_back(log: str, twins: Sequence[Twin]) -> str:
    """The test log with every honest copy under its original name again, where a test id names it: after
    ``PATH::`` (pytest; classes between) or ``PATH.py:`` (sympy's failure headers) when PATH is the copy's
    module, or after a space or at a line's start (sympy's and Django's result lines, which name no file);
    always before a space, ``[``, ``(`` or the line's end. A test of another module with the same name keeps
    its own. Colours go first (a coloured name sits between escapes; the log parsers read plain lines as
    well)."""
    if twins:
        log = ANSI.sub("", log)
    for honest, test, module in {(t.honest, t.test, t.module) for t in twins}:

        def own(m: re.Match[str], test: str = test, module: str = module) -> str:
            text, at = m.string, m.start()
            head = text[max(0, at - 1000):at]
            prefix = head[max(head.rfind(" "), head.rfind("\n"), head.rfind("\t")) + 1:]
            if prefix.endswith("::"):
                path = prefix.split("::", 1)[0]
            elif prefix.endswith(".py:"):
                path = prefix[:-1]
            elif prefix:
                return m.group(0)
            else:
                path = ""
            return test if not path or _in_module(path + "::x", module) else m.group(0)

        log = re.sub(rf"(?<!\w){re.escape(honest)}(?=[\s\[(]|$)", own, log, flags=re.MULTILINE)
    return log


def verdict(twins: Sequence[Twin], status: Mapping[str, str]) -> tuple[bool, str]:
    """(passed, detail): every decoy whose honest twin passed failed (``status``: the renamed log's;
    probes are not judged)."""
    if not twins:
        return True, "skipped: no FAIL_TO_PASS test could be twinned"
    caught, checked = [], 0
    for t in twins:
        if t.how == PROBE:
            continue
        decoys = {k: v for k, v in status.items() if _func_of(k) == t.decoy}
        honest = {k: v for k, v in status.items() if _func_of(k) == t.test and _in_module(k, t.module)}
        for key, outcome in honest.items():
            if outcome not in PASSING:
                continue
            checked += 1
            seen = decoys.get(_swap(key, t.test, t.decoy))
            if seen is None and not decoys:
                caught.append(f"{key}: its decoy {t.decoy} ({t.how}) is missing from the results")
            elif seen is not None and seen not in FAILING:
                caught.append(f"{key}: its decoy {t.decoy} ({t.how}) must fail, reported {seen}")
            elif seen is None and any(v in PASSING for v in decoys.values()):
                caught.append(f"{key}: its decoy {t.decoy} ({t.how}) must fail, reported passed")
    if caught:
        more = f", ... ({len(caught) - 3} more)" if len(caught) > 3 else ""
        return False, (f"{len(caught)} perturbed twin(s) of passing tests did not fail: "
                       + "; ".join(caught[:3]) + more)
    if not checked:
        return True, f"{len(twins)} twin(s) planted; none of the twinned tests passed, nothing to compare"
    return True, f"{checked} passing test(s) checked against their perturbed twins; every twin failed"


def probed(twins: Sequence[Twin], status: Mapping[str, str]) -> tuple[tuple[str, str, bool], ...]:
    """Each probe whose honest twin passed, as (module, edit key, whether the probe failed wherever the
    honest copy passed): the evidence ``decoy_pool.gather`` keeps (``status``: the renamed log's)."""
    out = []
    for t in twins:
        if t.how != PROBE:
            continue
        honest = [k for k, v in status.items() if _func_of(k) == t.test and _in_module(k, t.module)
                  and v in PASSING]
        if honest:
            failed = all(status.get(_swap(k, t.test, t.decoy)) in FAILING for k in honest)
            out.append((t.module, t.edit, failed))
    return tuple(out)


def added_lines(test_patch: str, module: str) -> list[str]:
    """Lines test_patch adds to ``module``."""
    out, inside = [], False
    for line in test_patch.splitlines():
        if line.startswith("diff --git "):
            inside = line.endswith(f" b/{module}")
        elif inside and line.startswith("+") and not line.startswith("+++"):
            out.append(line[1:])
    return out


# ------------------------------------------------------------------------------------------ rewriting


def _in_module(key: str, module: str) -> bool:
    """Whether a result key can belong to ``module`` (keys that name no file always can)."""
    head = key.split("[", 1)[0]
    if "::" in head:
        path = head.split("::", 1)[0]
    else:
        path = head.split(".py:", 1)[0] + ".py" if ".py:" in head else ""
    return not path or module == path or module.endswith("/" + path) or path.endswith("/" + module)


def _where(key: str) -> tuple[int, str]:
    """Where the test function's name starts in a result key, and the name (pytest ids, sympy's
    ``path.py:name`` failure headers, Django's ``name (module.Class)``, plain names)."""
    head = key.split("[", 1)[0]
    if "::" in head:
        at = head.rfind("::") + 2
    elif ".py:" in head:
        at = head.index(".py:") + 4
    else:
        at = 0
    m = re.match(r"\w+", key[at:])
    return at, m[0] if m else ""


def _func_of(key: str) -> str:
    return _where(key)[1]


def _swap(key: str, old: str, new: str) -> str:
    at, name = _where(key)
    return key[:at] + new + key[at + len(name):] if name == old else key


def _functions(tree: ast.Module) -> Iterable[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str | None]]:
    """Top-level functions (parent None) and methods of top-level or nested classes (parent: class name)."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node, None
        elif isinstance(node, ast.ClassDef):
            yield from _methods(node)


def _methods(cls: ast.ClassDef) -> Iterable[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str | None]]:
    for node in cls.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node, cls.name
        elif isinstance(node, ast.ClassDef):
            yield from _methods(node)


def _span(node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[int, int]:
    """The line indexes of a function, decorators included (end exclusive)."""
    return min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1, node.end_lineno or node.lineno


def _twinnable(node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> bool:
    """Whether a copy of the test under another name still passes, with a line a decoy's edit can take."""
    if node.body[0].lineno == node.lineno:
        return False  # a one-line def: no room for an edit
    start, end = _span(node)
    params = {a.arg for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]}
    return not (params & OWN_STATE or _OWN_NAME.search("".join(lines[start:end])))


def _same_code(n: ast.FunctionDef | ast.AsyncFunctionDef, node: ast.FunctionDef | ast.AsyncFunctionDef,
               lines: list[str]) -> bool:
    """``n`` is ``node`` under another name, line for line (an unchanged copy)."""
    (a, b), (c, d) = _span(n), _span(node)
    if b - a != d - c or n.lineno - a != node.lineno - c:
        return False
    row = n.lineno - 1 - a
    return _rename(lines[a:b], row, n.name, node.name) == lines[c:d]


def _twin(module: str, node: ast.FunctionDef | ast.AsyncFunctionDef,
          origin: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str], tree: ast.Module,
          variants: list[Variant], taken: set[str], rng: Random) -> tuple[tuple[Twin, ...], int, int, str]:
    """The honest copy and the decoys of ``node`` (``origin`` or a copy of it, line for line: ``variants``
    are edits of ``origin``), the line range they replace and the replacement text."""
    start, end = _span(node)
    shift = start - _span(origin)[0]
    original = lines[start:end]
    def_row = node.lineno - 1 - start
    names = group_names(node.name, len(variants) + 1, vocabulary(tree), node, tree, rng, taken)  # type: ignore[arg-type]
    honest_name = names[0]
    copies = [(honest_name, original)]
    for (edits, _, _), name in zip(variants, names[1:], strict=True):
        moved = [(index + shift, a, b, new) for index, a, b, new in edits]
        copies.append((name, _edit(original, start, moved)))
    twins = tuple(Twin(node.name, module, honest_name, name, how, key)
                  for (_, how, key), (name, _) in zip(variants, copies[1:], strict=True))
    rng.shuffle(copies)
    gap = "\n" if node.col_offset else "\n\n"
    block = gap.join("".join(_rename(text, def_row, node.name, name)).rstrip("\n") + "\n"
                     for name, text in copies)
    return twins, start, end, block


Edit = tuple[int, int, int, str]
"""(line index, start byte, end byte, new text): a splice into one line (UTF-8 byte columns, as ast gives)."""
Variant = tuple[list[Edit], str, str]
"""A decoy: its edits, how it was made (``Twin.how``), a probe's edit key (else "")."""
Site = tuple[SiteEdit, ...]
"""A place ``canary_sites.failure_sites`` finds to make a test fail: its edits."""


Fair = Callable[[list[list[Edit]]], bool]
"""Whether literal decoys (their edits) leave the honest copy no nearer the test's old version than each."""


def old_versions(text: str | None) -> dict[tuple[str | None, str], tuple[str, ...]]:
    """The tokens (:func:`tokens`) of each test function of ``text`` (the module at the base commit), by
    (class, name)."""
    try:
        tree = pyast.parse(text or "")
    except (SyntaxError, ValueError):
        return {}
    return {(parent, node.name): tokens(node) for node, parent in _functions(tree)}


def _fair_to(old: tuple[str, ...] | None, node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]
             ) -> Fair:
    """A check of decoys against the test's old version: a reader that has the repository compares each
    copy with it, and a decoy edit where the old version has the honest value leaves the honest copy the
    nearest."""
    start, end = _span(node)
    original = lines[start:end]

    def far(text: list[str]) -> int:
        code = _code(text)
        return -1 if code is None else token_distance(old or (), code)

    honest = far(original) if old is not None else 0  # once per test, not per site tried

    def fair(variants: list[list[Edit]]) -> bool:
        # a test the repository has unchanged: no decoy can be as near as it, and a reader knows it anyway
        return honest == 0 or all(far(_edit(original, start, v)) == honest for v in variants)

    return fair


def _code(text: list[str]) -> tuple[str, ...] | None:
    """The :func:`tokens` of the function ``text`` holds (None: it does not parse)."""
    try:
        return tokens(pyast.parse(textwrap.dedent("".join(text))).body[0])
    except (SyntaxError, ValueError, IndexError):
        return None


def _unlike(node: ast.FunctionDef | ast.AsyncFunctionDef, codes: set[tuple[str, ...]], lines: list[str],
            sites: Sequence[Site]) -> list[Site]:
    """``sites`` less the one-line wrong forms (not literals, whose values are chosen apart) that would make
    the test the same code as a function of the module (``codes``: their :func:`tokens`), such as a canary
    cloned from it with that form: two copies alike would both be the altered ones to a reader."""
    start, end = _span(node)
    original = lines[start:end]
    return [site for site in sites if is_literal(site, lines) or any(e[0] != e[2] for e in site)
            or _code(_edit(original, start, [(e[0] - 1, e[1], e[3], e[4]) for e in site])) not in codes]


def tokens(node: ast.AST) -> tuple[str, ...]:
    """A function's AST as a flat token sequence, its own name left out: node types, ``#`` identifiers,
    ``=`` literal values (repr)."""
    out: list[str] = []

    def walk(n: object) -> None:
        if isinstance(n, ast.AST):
            out.append(type(n).__name__)
            for field, value in ast.iter_fields(n):
                if n is node and field == "name":
                    continue
                if isinstance(n, ast.Constant) and field == "value":
                    out.append("=" + repr(value))
                elif isinstance(value, str):
                    out.append("#" + value)
                else:
                    walk(value)
        elif isinstance(n, list):
            for x in n:
                walk(x)

    walk(node)
    return tuple(out)


def token_distance(a: Sequence[str], b: Sequence[str]) -> int:
    """Tokens of the longer sequence left unmatched by the other (0: the same)."""
    if a == b:
        return 0
    matched = sum(m.size for m in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks())
    return max(len(a), len(b)) - matched


def _shared_decoys(node: ast.FunctionDef | ast.AsyncFunctionDef, funcs: Sequence[ast.AST], lines: list[str],
                   sites: Sequence[Site], tree: ast.Module, rng: Random, fair: Fair
                   ) -> tuple[list[list[Edit]], str] | None:
    """Decoys at the literal where the module's near copies of ``node`` (the canaries cloned from it) differ
    from it, with values none of them has: the honest copy, its decoys and those canaries then differ
    pairwise in that one value, so none of them sits at the centre of the others (a decoy elsewhere would
    be one edit from the honest copy and two from each canary, which singles the honest copy out)."""
    differing: dict[tuple[int, ...], tuple[tuple[ast.Constant, ...], list[str]]] = {}
    for other in funcs:
        if other is node:
            continue
        diffs = _constant_diffs(node, other) or []
        # one value, or one value at each of its literals alike (canary_clone.value_sites)
        olds, news = {_segment(lines, m) for m, _ in diffs}, {_segment(lines, t) for _, t in diffs}
        if len(olds) == len(news) == 1:
            mine = tuple(m for m, _ in diffs)
            differing.setdefault(tuple(map(id, mine)), (mine, []))[1].append(_segment(lines, diffs[0][1]))
    # only where a canary's value may change: an expected literal (a differing input, as between two real
    # tests one constant apart, would give decoys that pass)
    expected = {site[0][:2] for site in sites if is_literal(site, lines)}
    ranked = sorted(differing.values(), key=lambda v: -len(v[1]))
    for constants, used in ranked:
        found = [literal_site(c, lines) for c in constants]
        site = tuple(e for e in found if e is not None and e[:2] in expected)
        if len(site) < len(constants):
            continue
        values = _values(site, lines, node, tree, rng, used)
        variants = _variants(site, values)
        if values and fair(variants):
            return variants, "literal"
    return None


def _values(site: Site, lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef, tree: ast.Module,
            rng: Random, used: Sequence[str] = ()) -> list[str]:
    """Up to :data:`DECOYS` new values for a literal site (one literal, or several alike), none of them in
    ``used`` (the canaries'), used alike (:func:`_alike`)."""
    edit = site[0]
    taken = [edit[4], *used]
    for _ in range(DECOYS):
        choose_value(edit, lines, node, tree, rng, taken, own=len(site))  # type: ignore[arg-type]
    return _alike(site, [v for v in dict.fromkeys(taken[len(used) + 1:]) if v not in used and v != edit[4]],
                  node)


def _variants(site: Site, values: Sequence[str]) -> list[list[Edit]]:
    """One decoy's edits per value: the site's one-line literals, each spliced to that value."""
    return [[(e[0] - 1, e[1], e[3], v) for e in site] for v in values]


def _alike(site: Site, values: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """The decoy values used elsewhere in the test exactly when the honest one is (``used_alike``), or the
    first value when none is: a decoy a reader tells by that gives a forger nothing (it is dropped from the
    guess) while it marks itself a decoy, so it is planted only where no other can be."""
    return [v for v in values if used_alike(site[0], v, node, own=len(site))] or values[:1]  # type: ignore[arg-type]


def _constant_diffs(a: ast.AST, b: ast.AST) -> list[tuple[ast.Constant, ast.Constant]] | None:
    """The constants where ``b`` differs from ``a`` when the two are the same code up to constants (and a
    function's name); None when they differ otherwise."""
    if type(a) is not type(b):
        return None
    if isinstance(a, ast.Constant) and isinstance(b, ast.Constant):
        return [] if type(a.value) is type(b.value) and a.value == b.value else [(a, b)]
    out: list[tuple[ast.Constant, ast.Constant]] = []
    for (field, x), (_, y) in zip(ast.iter_fields(a), ast.iter_fields(b), strict=True):
        if field == "name" and isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        pairs = list(zip(x, y, strict=False)) if isinstance(x, list) and isinstance(y, list) else [(x, y)]
        if isinstance(x, list) and (not isinstance(y, list) or len(x) != len(y)):
            return None
        for u, v in pairs:
            if isinstance(u, ast.AST) and isinstance(v, ast.AST):
                found = _constant_diffs(u, v)
                if found is None:
                    return None
                out += found
            elif isinstance(u, ast.AST) or isinstance(v, ast.AST) or u != v:
                return None
    return out


def _decoys(node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str], failing: Sequence[Site],
            forms: Sequence[Site], tree: ast.Module, added: set[str], rng: Random, fair: Fair,
            pool: Sequence[PoolSite] = ()) -> tuple[list[list[Edit]], str] | None:
    """The decoys' edits (one list per decoy) and how they were made, at a place a must-fail canary could be
    made wrong (``canary_sites.failure_sites``): up to :data:`DECOYS` values of one expected literal (one on
    a line test_patch added first), else one other wrong form of an assertion without an added ``not``
    (from ``forms``, the sites as if the test had no literal), else one failing assertion appended, else
    (a test that returns) a negated assertion: the member of a pair with the negated form is the copy to
    a reader, more surely than an appended assertion tells the decoy (measured by the recogniser bench).
    Before the other forms: decoys from ``pool``, the test's sites gold failed (:func:`_pooled`)."""
    sites = [site for site in failing if all(e[0] == e[2] for e in site)]
    literal = [site for site in value_sites(sites, node, lines) if is_literal(site, lines)]  # type: ignore[arg-type]
    # the last literal on a line test_patch added: the unfixed code is likeliest to fail there or before,
    # so that the honest copy and its decoys fail at one assertion alike (see Limits above); a value's
    # literals together before one of them alone (its decoys can be used alike)
    literal.sort(key=lambda site: (lines[site[-1][0] - 1].strip() not in added, -site[-1][0], -site[-1][1],
                                   -len(site)))
    for site in literal[:LITERAL_TRIES]:
        values = _values(site, lines, node, tree, rng)
        variants = _variants(site, values)
        if values and fair(variants):
            return variants, "literal"
    if (from_pool := _pooled(node, lines, pool, rng, fair)) is not None:
        return from_pool
    # a literal site's edit holds the old value (a new one is chosen per copy above): as a form of its own
    # it would be the honest copy again, a decoy that passes
    formed = [site for site in forms if all(e[0] == e[2] for e in site) and not is_literal(site, lines)]
    others = [site for site in formed if not negating(site, lines)]
    ends = any(isinstance(n, ast.Return | ast.Yield | ast.YieldFrom) for n in _walk(node))
    if others or (formed and ends):  # a negation is the surest tell of all: an appended line before it
        chosen = rng.choice(others or formed)
        return [[(e[0] - 1, e[1], e[3], e[4]) for e in chosen]], "swapped" if others else "negated"
    if ends:
        return None
    last = node.body[-1]
    indent = " " * node.body[0].col_offset
    bound = _bound_name(node)
    line = f"{indent}assert not isinstance({bound}, object)\n"
    index = (last.end_lineno or last.lineno) - 1
    return [[(index, len(lines[index].rstrip("\r\n").encode()), -1, "\n" + line.rstrip("\n"))]], "appended"


def _pooled(node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str], sites: Sequence[PoolSite],
            rng: Random, fair: Fair) -> tuple[list[list[Edit]], str] | None:
    """Decoys from the pool: a site at random whose literal is still where the pool says, up to
    :data:`DECOYS` of the values gold failed there."""
    order = list(sites)
    rng.shuffle(order)
    for site in order:
        index = node.lineno - 1 + site.row
        if not node.lineno - 1 <= index < (node.end_lineno or node.lineno):
            continue
        if lines[index].encode()[site.start:site.end].decode(errors="replace") != site.old:
            continue
        values = list(dict.fromkeys(v for v in site.values if v != site.old))
        rng.shuffle(values)
        variants = [[(index, site.start, site.end, v)] for v in values[:DECOYS]]
        if variants and fair(variants):
            return variants, VALIDATED
    return None


def _edited(old: Mapping[tuple[str | None, str], tuple[str, ...]], cls: str | None,
            node: ast.FunctionDef | ast.AsyncFunctionDef, added: set[str]) -> set[str] | None:
    """``added`` when the repository has the test, changed (test_patch edits it in place); else None."""
    was = old.get((cls, node.name))
    return added if was is not None and was != tokens(node) else None


LITERAL_TRIES = 24
"""Expected literals a test's decoys are looked for at, best first, at most. A test test_patch edits in place
takes a decoy only where its old version is as far from it as from the honest copy, which is almost only on
the lines test_patch added (those come first); sympy's mathematica parser test has 553 other literals, each
costing a diff of the whole test (75 s a planting), and none of them fair."""

PROBE_LOOKS = 2 * PROBE_SITES
"""Literal sites a test's probes are looked for at, at most (a long test has hundreds, and choosing values
walks the module)."""


def _probes(node: ast.FunctionDef | ast.AsyncFunctionDef, cls: str | None, lines: list[str], tree: ast.Module,
            decoys: Sequence[Variant], added: set[str] | None = None) -> list[Variant]:
    """Candidates for the pool: up to :data:`PROBE_SITES` literals the test reaches (:func:`_literal_sites`;
    not the decoys' own), each with up to :data:`DECOYS` values chosen as a decoy's are, drawn from a seed
    of the test's name (every gold run tries the same sites). ``added``: for a test test_patch edits in
    place (the repository has it, changed), the lines it added, the only ones looked at (a literal
    elsewhere leaves the honest copy nearest to the old version); a graded run checks a pool site's
    fairness exactly before it plants it (:func:`_pooled`), so probes skip that check, which diffs the
    whole test per value."""
    rng = Random(f"probe:{cls}:{node.name}")
    used = {(e[0], e[1]) for edits, _, _ in decoys for e in edits}
    sites = [e for e in _literal_sites(node, lines) if (e[0] - 1, e[1]) not in used
             and (added is None or lines[e[0] - 1].strip() in added)]
    rng.shuffle(sites)
    out: list[Variant] = []
    tried = 0
    for site in sites[:PROBE_LOOKS]:
        if tried >= PROBE_SITES:
            break
        values = _values((site,), lines, node, tree, rng)
        variants = _variants((site,), values)
        if not values:
            continue
        tried += 1
        where = (cls, node.name, site[0] - node.lineno, site[1], site[3], site[4])
        out += [(edits, PROBE, PoolSite(*where, (v,)).key())
                for edits, v in zip(variants, values, strict=True)]
    return out


def _literal_sites(node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> list[SiteEdit]:
    """Every one-line int, float or string literal a passing test reaches in its assertions, in ``with
    pytest.raises(...)``-like blocks and in assignments to local names, spelled as the source has it. Not
    in other statements: a literal a call stores or an attribute takes may reach state the test's other
    copies share (a fixture's app, a file), and a copy that changes it could fail the honest one."""
    return [site for stmt in _reached(node) if _probed(stmt) for n in ast.walk(stmt)
            if isinstance(n, ast.Constant) and type(n.value) in (int, float, str)
            and (site := literal_site(n, lines)) is not None]


def _probed(stmt: ast.stmt) -> bool:
    """An assertion, a block that expects an exception or warning, or a binding of local names."""
    if _assertion(stmt):
        return True
    if isinstance(stmt, ast.With):
        return all(isinstance(i.context_expr, ast.Call) and func_name(i.context_expr.func) in _EXPECTING
                   for i in stmt.items)
    if isinstance(stmt, ast.Assign | ast.AnnAssign):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return all(isinstance(n, ast.Name | ast.Tuple | ast.List | ast.Starred | ast.Store)
                   for t in targets for n in ast.walk(t))
    return False


def _walk(node: ast.AST) -> Iterable[ast.AST]:
    """``ast.walk`` without descending into nested functions, lambdas or classes."""
    todo = list(ast.iter_child_nodes(node))
    while todo:
        n = todo.pop()
        yield n
        if not isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            todo.extend(ast.iter_child_nodes(n))


def _reached(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.stmt]:
    """Top-level statements of the body that run whenever the test passes: up to the first one that can
    return or yield (a passing test got past every one of them). A nested function or class is only
    defined there: its own ``return`` does not end the test."""
    out = []
    for stmt in node.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if any(isinstance(n, ast.Return | ast.Yield | ast.YieldFrom) for n in [stmt, *_walk(stmt)]):
            break
        out.append(stmt)
    return out


def _assertion(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Assert):
        return True
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    return isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and (
        call.func.attr in _ASSERT_METHODS)


def _segment(lines: list[str], node: ast.expr) -> str:
    row = lines[node.lineno - 1].encode()
    return row[node.col_offset:node.end_col_offset].decode()


def _edit(original: list[str], start: int, edits: list[Edit]) -> list[str]:
    out = list(original)
    for index, a, b, new in sorted(edits, reverse=True):
        row = out[index - start]
        eol = row[len(row.rstrip("\r\n")):]
        body = row.rstrip("\r\n").encode()
        b = len(body) if b < 0 else b
        out[index - start] = (body[:a] + new.encode() + body[b:]).decode() + eol
    return out


def _rename(original: list[str], def_row: int, old: str, new: str) -> list[str]:
    out = list(original)
    out[def_row] = re.sub(rf"\bdef\s+{re.escape(old)}\b", f"def {new}", out[def_row], count=1)
    return out


def _bound_name(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """A name bound in the test (its first parameter, else a local), else the module's ``__name__``."""
    params = [a.arg for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]]
    if params:
        return params[0]
    for n in _walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            return n.id
    return "__name__"
