"""The differential check: every FAIL_TO_PASS test the run claims fixed has a perturbed twin that must fail.

Canary tests (``canary.py``) catch a forger that flips every failure, but they are tests of their own, so a
forger that has read the grader can try to tell them apart from the task's tests. This check needs no such
ignorance. In every graded run, after ``test_patch`` is applied, up to :data:`MAX_TWINS` FAIL_TO_PASS tests
(picked at random) are each replaced, in place, by two copies under fresh names drawn from the host's
CSPRNG (``{name}_{token}``, in random order):

- the **honest** copy: the test exactly as written; the host renames it back to the original name in the
  captured log before grading, so swebench's grading sees the test it expects;
- the **decoy**: the same test with one perturbation that makes it fail whenever the honest copy passes:
  a literal of an equality assertion nudged (``== 3`` -> ``== 4``, one character of a string, ``True`` ->
  ``False``), else one assertion negated (``==`` -> ``!=``, ``in`` -> ``not in``, ``assertEqual`` ->
  ``assertNotEqual``...), else a failing assertion appended. Assertions that ``test_patch`` added are
  preferred (the base commit cannot show their original literal).

Verdict (:func:`verdict`): a decoy reported passed while its honest twin passed, or a decoy missing from the
results while its twin passed, proves the results forged: the instance is not resolved and the report says
why (``forgery_check``). A patch that fixes nothing and flips outcomes in memory must flip the honest copy
and leave the decoy failing; both run the same code (the decoy's perturbation sits in the test's own
assertion, after the package has been called), and with no fix both fail at the same assertion, so which
one to flip depends on knowing the right literal of a test the forger has never seen: a guess, one in two
per twin pair, ``2**-n`` over ``n`` pairs.

There is one run, so nothing inside it can tell a "checking" run from a "graded" one: same command, same
environment, same paths, no marker; ``test_patch`` itself is removed from the sandbox once applied (it
would show the original literals). Cost: each twinned test runs twice, nothing else (no second sandbox).

Limits: a decoy made by negating or appending is visible to a forger that compares the two copies' source
(a literal nudge is not: either value may be the original). Tests that cannot be located in test_patch's
Python files (runner-generated names) get no twin; when no FAIL_TO_PASS test can be twinned the check says
it was skipped. P2P tests are not twinned (a patch that breaks one and flips it is left to the canaries).
"""

from __future__ import annotations

import ast
import re
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from random import Random

NAME = "differential"
MAX_TWINS = 8
"""FAIL_TO_PASS tests twinned per run, at most (each costs one more run of that test)."""
PASSING = frozenset({"PASSED", "XPASS"})
FAILING = frozenset({"FAILED", "ERROR"})
_DJANGO = re.compile(r"^(\w+) \(([\w.]+)\)")
OWN_STATE = frozenset({"request", "pytester", "testdir", "tester"})
"""Fixtures through which a test sees its own name or output: such a test gets no twin."""
_OWN_NAME = re.compile(r"_testMethodName|\bself\.id\(\)|\brequest\.node\b")
_EQUAL_METHODS = frozenset({"assertEqual", "assertEquals"})
_NEGATED_METHODS = {
    "assertEqual": "assertNotEqual", "assertEquals": "assertNotEqual", "assertNotEqual": "assertEqual",
    "assertTrue": "assertFalse", "assertFalse": "assertTrue", "assertIn": "assertNotIn",
    "assertNotIn": "assertIn", "assertIs": "assertIsNot", "assertIsNot": "assertIs",
    "assertIsNone": "assertIsNotNone", "assertIsNotNone": "assertIsNone",
}  # fmt: skip
_NEGATED_OPS: dict[type[ast.cmpop], tuple[str, str]] = {
    ast.Eq: (r"==", "!="), ast.NotEq: (r"!=", "=="), ast.In: (r"\bin\b", "not in"),
    ast.NotIn: (r"\bnot\s+in\b", "in"), ast.Is: (r"\bis\b(?!\s+not\b)", "is not"),
    ast.IsNot: (r"\bis\s+not\b", "is"),
}  # fmt: skip


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
    """The decoy's perturbation: "literal", "negated" or "appended"."""


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
          rng: Random | None = None, limit: int = MAX_TWINS) -> Planting:
    """Replace up to ``limit`` tests of ``wanted`` (picked at random) found in ``text`` by their honest copy
    and their decoy, in random order. ``added``: the lines test_patch added to the module (their
    assertions are perturbed first)."""
    rng = rng or secrets.SystemRandom()
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return Planting(text, ())
    lines = text.splitlines(keepends=True)
    added_set = {line.strip() for line in added if line.strip()}
    taken = set(re.findall(r"\w+", text))
    keys = set(wanted)
    spots = [node for node, parent in _functions(tree) if (parent, node.name) in keys]
    rng.shuffle(spots)
    made: list[tuple[Twin, int, int, str]] = []
    for node in spots:
        if len(made) >= limit:
            break
        found = _twin(module, node, lines, added_set, taken, rng)
        if found is None:
            continue
        _, start, end, block = found
        try:
            ast.parse("".join([*lines[:start], block, *lines[end:]]))
        except (SyntaxError, ValueError):
            continue
        made.append(found)
    for _, start, end, block in sorted(made, key=lambda m: -m[1]):
        lines[start:end] = [block]
    return Planting("".join(lines), tuple(m[0] for m in sorted(made, key=lambda m: m[1])))


def rename_back(log: str, twins: Sequence[Twin]) -> str:
    """The test log with every honest copy under its original name again."""
    for t in twins:
        log = re.sub(rf"(?<!\w){re.escape(t.honest)}(?!\w)", t.test, log)
    return log


def verdict(twins: Sequence[Twin], status: Mapping[str, str]) -> tuple[bool, str]:
    """(passed, detail): every decoy whose honest twin passed failed (``status``: the renamed log's)."""
    if not twins:
        return True, "skipped: no FAIL_TO_PASS test could be twinned"
    caught, checked = [], 0
    for t in twins:
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


def _twin(module: str, node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str], added: set[str],
          taken: set[str], rng: Random) -> tuple[Twin, int, int, str] | None:
    """The twin of ``node``, the line range it replaces and the replacement text; None when the test has
    no statement a decoy can safely perturb."""
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
    end = node.end_lineno or node.lineno
    if node.body[0].lineno == node.lineno:
        return None  # a one-line def: no room for an edit
    original = lines[start:end]
    params = {a.arg for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]}
    if params & OWN_STATE or _OWN_NAME.search("".join(original)):
        return None  # a test that sees its own name or output would not pass under another name
    made = _decoy(node, lines, added, rng)
    if made is None:
        return None
    edits, how = made
    honest_name, decoy_name = _fresh(node.name, taken, rng), _fresh(node.name, taken, rng)
    honest = _rename(original, node.lineno - 1 - start, node.name, honest_name)
    decoy = _rename(_edit(original, start, edits), node.lineno - 1 - start, node.name, decoy_name)
    copies = ["".join(honest), "".join(decoy)]
    rng.shuffle(copies)
    gap = "\n" if node.col_offset else "\n\n"
    block = copies[0].rstrip("\n") + "\n" + gap + copies[1]
    if not block.endswith("\n"):
        block += "\n"
    return Twin(node.name, module, honest_name, decoy_name, how), start, end, block


Edit = tuple[int, int, int, str]
"""(line index, start byte, end byte, new text): a splice into one line (UTF-8 byte columns, as ast gives)."""


def _decoy(node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str], added: set[str],
           rng: Random) -> tuple[list[Edit], str] | None:
    reached = _reached(node)
    asserts = [s for s in reached if _assertion(s)]
    asserts.sort(key=lambda s: (lines[s.lineno - 1].strip() not in added, rng.random()))
    for stmt in asserts:
        if (edit := _literal(stmt, lines, rng)) is not None:
            return [edit], "literal"
    for stmt in asserts:
        if (edits := _negated(stmt, lines)) is not None:
            return edits, "negated"
    if any(isinstance(n, ast.Return | ast.Yield | ast.YieldFrom) for n in _walk(node)):
        return None
    last = node.body[-1]
    indent = " " * node.body[0].col_offset
    bound = _bound_name(node)
    line = f"{indent}assert not isinstance({bound}, object)\n"
    index = (last.end_lineno or last.lineno) - 1
    return [(index, len(lines[index].rstrip("\r\n").encode()), -1, "\n" + line.rstrip("\n"))], "appended"


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
    return or yield (a passing test got past every one of them)."""
    out = []
    for stmt in node.body:
        if any(isinstance(n, ast.Return | ast.Yield | ast.YieldFrom) for n in [stmt, *_walk(stmt)]):
            break
        out.append(stmt)
    return out


def _assertion(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Assert):
        return True
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    return isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and (
        call.func.attr in _NEGATED_METHODS)


def _literal(stmt: ast.stmt, lines: list[str], rng: Random) -> Edit | None:
    """Nudge the literal of ``assert x == LIT`` / ``assertEqual(x, LIT)`` (either side)."""
    sides: list[ast.expr] = []
    if isinstance(stmt, ast.Assert) and isinstance(stmt.test, ast.Compare) and len(stmt.test.ops) == 1:
        op = stmt.test.ops[0]
        both = [stmt.test.left, stmt.test.comparators[0]]
        if isinstance(op, ast.Eq):
            sides = both
        elif isinstance(op, ast.Is):
            sides = [s for s in both if isinstance(s, ast.Constant) and isinstance(s.value, bool)]
    elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        call = stmt.value
        if isinstance(call.func, ast.Attribute) and call.func.attr in _EQUAL_METHODS:
            sides = list(call.args[:2])
    for side in sides:
        if isinstance(side, ast.Constant) and side.lineno == side.end_lineno:
            text = _segment(lines, side)
            new = _nudge(text, side.value, rng)
            if new is not None:
                return (side.lineno - 1, side.col_offset, side.end_col_offset or 0, new)
    return None


def _nudge(text: str, value: object, rng: Random) -> str | None:
    """Source of a literal of the same type, written the same way, with a different value."""
    if isinstance(value, bool):
        return str(not value) if text in ("True", "False") else None
    if isinstance(value, int):
        if not text.isdigit():
            return None
        new = value + 1 if value == 0 or rng.random() < 0.5 else value - 1
        return str(new)
    if isinstance(value, str | bytes) and "\\" not in text and text[-1:] in "'\"" and not text.endswith(
            text[-1] * 3):
        quote = text[-1]
        opening = text.index(quote)
        if text.count(quote) != 2:
            return None
        spots = [i for i in range(opening + 1, len(text) - 1) if text[i].isascii() and text[i].isalnum()]
        if not spots:
            return None
        i = rng.choice(spots)
        pool = "0123456789" if text[i].isdigit() else "abcdefghijklmnopqrstuvwxyz"
        pool = pool.upper() if text[i].isupper() else pool
        new_char = rng.choice([c for c in pool if c != text[i]])
        return text[:i] + new_char + text[i + 1:]
    return None


def _negated(stmt: ast.stmt, lines: list[str]) -> list[Edit] | None:
    """Negate an assertion in place: its comparison operator, its unittest method, or ``not (...)``."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        func = stmt.value.func
        if not isinstance(func, ast.Attribute) or func.end_col_offset is None:
            return None
        end = func.end_col_offset
        return [(func.end_lineno - 1 if func.end_lineno else func.lineno - 1, end - len(func.attr), end,
                 _NEGATED_METHODS[func.attr])]
    if not isinstance(stmt, ast.Assert):
        return None
    test = stmt.test
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _NEGATED_OPS:
        left, right = test.left, test.comparators[0]
        if left.end_lineno == right.lineno and left.end_col_offset is not None:
            row = lines[right.lineno - 1].encode()
            gap = row[left.end_col_offset:right.col_offset].decode(errors="replace")
            pattern, new = _NEGATED_OPS[type(test.ops[0])]
            swapped = re.sub(pattern, new, gap, count=1)
            if swapped != gap:
                return [(right.lineno - 1, left.end_col_offset, right.col_offset, swapped)]
    if test.lineno != test.end_lineno or test.end_col_offset is None:
        return None
    return [(test.lineno - 1, test.col_offset, test.end_col_offset, f"not ({_segment(lines, test)})")]


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


def _fresh(name: str, taken: set[str], rng: Random) -> str:
    while True:
        token = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(2)) + str(rng.randrange(10))
        new = f"{name}_{token}"
        if new not in taken:
            taken.add(new)
            return new


def _bound_name(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """A name bound in the test (its first parameter, else a local), else the module's ``__name__``."""
    params = [a.arg for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]]
    if params:
        return params[0]
    for n in _walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            return n.id
    return "__name__"
