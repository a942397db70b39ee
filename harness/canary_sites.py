"""Where a cloned canary is made wrong (``canary_clone.py``): the sites of a test, each a set of edits after
which the copy fails where the original passes.

Best first: the expected literal of an ``==`` or of an equality assertion call (another value of its type,
chosen when the clone is rendered), also where the expected value is bound to a local name first, an element
of an expected list display dropped or repeated, the exception class of a ``raises(E, ...)`` swapped for an
unrelated built-in one, an expected enum member swapped for another, the assertion in another
form that fails where it holds (``x is None`` as ``x is False``, ``not x`` as ``x``, ``a < b`` as ``a > b``),
an ``==``/``in``/unittest assertion turned into its opposite, ``assert x`` into ``assert not x``. Only
top-level statements with no ``return`` or skip before them: when the original passes, the copy reaches the
edited one.
"""

from __future__ import annotations

import ast
import builtins
import math
import re
import string
import weakref
from collections.abc import Sequence

from envfarm import pyast

from .canary_types import Edit

SKIPS = frozenset({"skip", "skipTest", "importorskip", "xfail", "fail"})
"""Calls that end a test before an assertion: none may run before the edited one."""
FLIPS = {
    "assertTrue": "assertFalse", "assertFalse": "assertTrue", "assertIsNone": "assertIsNotNone",
    "assertIsNotNone": "assertIsNone", "assertIn": "assertNotIn", "assertNotIn": "assertIn",
    "assertIs": "assertIsNot", "assertIsNot": "assertIs", "assertIsInstance": "assertNotIsInstance",
    "assertNotIsInstance": "assertIsInstance",
}
DATE_TYPES = frozenset({"date", "datetime", "time", "timedelta"})
VALUE_TYPES = frozenset({"Decimal", "Fraction"})
SYMPY_VALUES = frozenset({"Float", "Integer", "Rational", "S", "Symbol", "sqrt"})
"""sympy's constructors (imported from sympy) whose first argument sets the value, one to one: ``sqrt(5)``,
``Float(16)``, ``Symbol('x')``; another argument gives another value (``Integer`` only from an int)."""
LITERAL_TYPES = (int, float, str, bytes)
DATA_TYPES = {"array": 1, "DataArray": 2, "Dataset": 2, "DataFrame": 2, "Series": 2, "Variable": 2}
"""Containers whose leading positional arguments (how many) set what an exact comparison sees (numpy's data;
pandas' data and index; xarray's data and coordinates, or dimensions and data): literals there and in the
keywords ``DATA_KEYWORDS``, never in ``attrs`` or ``name``, which xarray's ``assert_equal`` ignores."""
DATA_KEYWORDS = frozenset({"data", "coords", "dims", "data_vars", "index", "columns"})


def calls(stmts: Sequence[ast.stmt], names: frozenset[str]) -> bool:
    for stmt in stmts:
        for n in ast.walk(stmt):
            if isinstance(n, ast.Call):
                f = n.func
                name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                if name in names:
                    return True
    return False


def _body(node: ast.FunctionDef) -> list[ast.stmt]:
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        return body[1:]
    return body


def failure_sites(node: ast.FunctionDef, lines: list[str], tree: ast.Module) -> list[tuple[Edit, ...]]:
    """Edits that make ``node`` fail, literal replacements first, then an element dropped from an expected
    list, then swaps of a truth form or an order, then flips, then negations; the first kind the test has."""
    literal, forms = failure_kinds(node, lines, tree)
    return literal or forms


def failure_kinds(node: ast.FunctionDef, lines: list[str], tree: ast.Module
                  ) -> tuple[list[tuple[Edit, ...]], list[tuple[Edit, ...]]]:
    """The literal replacements of :func:`failure_sites`, and its other sites as if the test had no
    literal (the forms a decoy takes where no literal is fair)."""
    sympy, free = sympy_names(tree), _free_exceptions(tree)
    literal: list[tuple[Edit, ...]] = []
    drop: list[tuple[Edit, ...]] = []
    raising: list[tuple[Edit, ...]] = []
    member: list[tuple[Edit, ...]] = []
    swap: list[tuple[Edit, ...]] = []
    flip: list[tuple[Edit, ...]] = []
    negate: list[tuple[Edit, ...]] = []
    body = _body(node)
    for i, stmt in enumerate(body):
        before = body[:i]
        if any(isinstance(n, ast.Return) for s in before for n in ast.walk(s)) or calls(before, SKIPS):
            break
        literal += [(site,) for n in _bound_expected(stmt, before, sympy) if (site := literal_site(n, lines))]
        if isinstance(stmt, ast.Assert):
            # every operand of a top-level `and` holds when the original passes: a wrong value in any fails
            parts = stmt.test.values if isinstance(stmt.test, ast.BoolOp) and isinstance(
                stmt.test.op, ast.And) else [stmt.test]
            literal += [e for part in parts for e in _assert_literals(part, lines, sympy) if e]
            drop += [e for part in parts for e in _drops(part, lines)]
            member += [e for part in parts for e in _members(part, tree)]
            swap += _swaps(stmt.test, lines)
            flip += [e for e in [_assert_flip(stmt.test, lines)] if e]
            if not isinstance(stmt.test, ast.Compare):
                negate.append(_negate(stmt.test, lines))
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            literal += [e for e in _unittest_literals(stmt.value, lines) if e]
            flip += [e for e in [_unittest_flip(stmt.value)] if e]
            raising += _raises(stmt.value, free)
        if isinstance(stmt, ast.With):
            raising += [e for item in stmt.items if isinstance(item.context_expr, ast.Call)
                        for e in _raises(item.context_expr, free)]
    return literal, drop or raising or member or swap or flip or negate


RAISES = frozenset({"raises", "assertRaises", "assertRaisesRegex"})
"""Calls that pass only when their code raises the exception class they are given first."""
OTHER_ERRORS = ("AttributeError", "IndexError", "KeyError", "LookupError", "NotImplementedError",
                "OverflowError", "RuntimeError", "TypeError", "ValueError", "ZeroDivisionError")
MIXED: tuple[type[Exception], ...] = (AttributeError, LookupError, OSError, TypeError, ValueError)
"""Families libraries derive one class from two of (numpy's ``AxisError(ValueError, IndexError)``,
requests' ``InvalidURL(IOError, ValueError)``, ``io.UnsupportedOperation(OSError, ValueError)``, attribute
dicts' ``KeyError``/``AttributeError``): a swap never goes from one of them to another, since what the
code raises might be both."""


MEMBER = re.compile(r"^[A-Z][A-Z0-9_]*$")
"""An enum member's name (``ExitCode.OK``), of a class named in CamelCase (``CAMEL``)."""
CAMEL = re.compile(r"^[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*$")


def _members(test: ast.expr, tree: ast.Module) -> list[tuple[Edit, ...]]:
    """``x == Base.NAME`` with ``NAME`` swapped for another member of ``Base`` the module names (pytest's
    ``result.ret == ExitCode.OK`` as ``ExitCode.USAGE_ERROR``): ``x`` is one member, so the copy fails where
    the original passes, with no ``not`` added. Assumes distinct members differ (an enum alias, two names
    for one value, would let the copy pass: the canary check then flags the run)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return []
    sides = [x for x in (test.left, test.comparators[0]) if _member(x)]
    if len(sides) != 1 or not isinstance(side := sides[0], ast.Attribute):
        return []
    line, end, base = side.end_lineno, side.end_col_offset, side.value
    if line is None or end is None or line != side.lineno or not isinstance(base, ast.Name):
        return []
    others = sorted(_named_members(tree).get(base.id, set()) - {side.attr})
    return [((line, end - len(side.attr), line, end, other),) for other in others]


def _member(n: ast.expr) -> bool:
    return isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and bool(
        MEMBER.match(n.attr) and CAMEL.match(n.value.id))


_MEMBERS: weakref.WeakKeyDictionary[ast.Module, dict[str, set[str]]] = weakref.WeakKeyDictionary()


def _named_members(tree: ast.Module) -> dict[str, set[str]]:
    """The members (``MEMBER`` names) the module reads of each CamelCase name."""
    if (known := _MEMBERS.get(tree)) is None:
        known = {}
        for n in ast.walk(tree):
            if _member(n) and isinstance(n.ctx, ast.Load):  # type: ignore[arg-type, attr-defined]
                known.setdefault(n.value.id, set()).add(n.attr)  # type: ignore[attr-defined]
        _MEMBERS[tree] = known
    return known


_FREE: weakref.WeakKeyDictionary[ast.Module, dict[str, bool]] = weakref.WeakKeyDictionary()
"""``_free_exceptions`` per parsed module (every test of a module asks; one walk of the tree serves)."""


def _free_exceptions(tree: ast.Module) -> dict[str, bool]:
    """Built-in exception classes the module does not rebind: those it names (True), ``OTHER_ERRORS``."""
    if (known := _FREE.get(tree)) is not None:
        return known
    bound: set[str] = set()
    used: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            used.add(n.id)
            if isinstance(n.ctx, ast.Store):
                bound.add(n.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            bound.add(n.name)
    free = {name: name in used for name in sorted(used | set(OTHER_ERRORS))
            if name not in bound and _error(name) is not None}
    _FREE[tree] = free
    return free


def _error(name: str) -> type[BaseException] | None:
    cls = getattr(builtins, name, None)
    usable = isinstance(cls, type) and issubclass(cls, Exception) and not issubclass(cls, Warning)
    return cls if usable and cls is not Exception else None


def _unrelated(a: type[BaseException], b: type[BaseException]) -> bool:
    """No class can be caught as both without deriving from two families (see ``MIXED``)."""
    return not (issubclass(a, b) or issubclass(b, a) or (issubclass(a, MIXED) and issubclass(b, MIXED)))


def _raises(call: ast.Call, free: dict[str, bool]) -> list[tuple[Edit, ...]]:
    """``raises(E, ...)`` (pytest's, sympy's, unittest's ``assertRaises``) with ``E`` swapped for a built-in
    exception class unrelated to it (neither a subclass of the other, not both in ``MIXED``): what the code
    raises, an ``E``, is then not caught, so the copy fails where the original passes.
    Classes the module names elsewhere when there are any (a class it never names would stand out)."""
    if func_name(call.func) not in RAISES or not call.args or not isinstance(call.args[0], ast.Name):
        return []
    old = call.args[0]
    cls = _error(old.id) if old.id in free else None
    if cls is None:
        return []
    others = [n for n in free if _unrelated(cls, _error(n))]  # type: ignore[arg-type]
    named = [n for n in others if free[n]]
    return [(_span(old, n),) for n in (named or others)]


def sympy_names(tree: ast.Module) -> frozenset[str]:
    """The ``SYMPY_VALUES`` constructors the module imports from sympy (under their own names)."""
    return frozenset(a.name for n in tree.body if isinstance(n, ast.ImportFrom) and (n.module or "").split(
        ".")[0] == "sympy" for a in n.names if a.name in SYMPY_VALUES and a.asname in (None, a.name))


def literal_value(n: ast.AST) -> object | None:
    if isinstance(n, ast.Constant) and type(n.value) in LITERAL_TYPES:
        return n.value
    if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub) and isinstance(n.operand, ast.Constant):
        value = n.operand.value
        if type(value) in (int, float):
            return -value  # type: ignore[operator]
    return None


def plain(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (str, bytes)):
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        return len(text) <= 60 and all(c in string.printable and c not in "\\'\"\r\x0b\x0c" for c in text)
    return True


def raw_plain(value: object) -> bool:
    """A string a raw literal spells as it is, backslashes included (``r"\\left(A\\right)"``, LaTeX in sympy's
    printing tests): printable, one line, no quote, not ending in a backslash."""
    return (isinstance(value, str) and len(value) <= 60 and not value.endswith("\\")
            and all(c in string.printable and c not in "'\"\r\n\t\x0b\x0c" for c in value))


def is_raw(like: str) -> bool:
    """Whether literal text ``like`` is a raw string (``r"..."``)."""
    return like[:1] in "rR" and like[1:2] in ("'", '"')


def _segment(lines: list[str], n: ast.AST) -> str | None:
    """The source text of ``n`` when it spans one line."""
    if n.lineno != n.end_lineno:  # type: ignore[attr-defined]
        return None
    raw = lines[n.lineno - 1].encode()  # type: ignore[attr-defined]
    return raw[n.col_offset:n.end_col_offset].decode(errors="replace")  # type: ignore[attr-defined]


def _text(lines: list[str], n: ast.AST) -> str:
    """The source text of ``n``."""
    first, last = n.lineno, n.end_lineno  # type: ignore[attr-defined]
    chunk = [line.encode() for line in lines[first - 1:last]]
    if len(chunk) == 1:
        return chunk[0][n.col_offset:n.end_col_offset].decode()  # type: ignore[attr-defined]
    chunk[0], chunk[-1] = chunk[0][n.col_offset:], chunk[-1][:n.end_col_offset]  # type: ignore[attr-defined]
    return b"".join(chunk).decode()


def _span(n: ast.AST, text: str) -> Edit:
    return (n.lineno, n.col_offset, n.end_lineno, n.end_col_offset, text)  # type: ignore[attr-defined]


def literal_site(n: ast.AST, lines: list[str]) -> Edit | None:
    value = literal_value(n)
    seg = _segment(lines, n)
    if value is None or seg is None:
        return None
    spelled = plain(value) or (is_raw(seg) and raw_plain(value))
    # the new value is chosen when the clone is rendered (see _render)
    return _span(n, seg) if spelled and _simple_literal(seg, value) else None


def _simple_literal(seg: str, value: object) -> bool:
    if isinstance(value, str):
        if is_raw(seg):  # r"-A", r"\frac{1}{2}": no escapes (see plain, raw_plain)
            return seg[1:] == seg[1] + value + seg[1]
        return seg[:1] in ("'", '"') and seg == seg[0] + escaped(value) + seg[0]
    if isinstance(value, bytes):
        text = value.decode("latin-1")
        return seg[:1] in "bB" and seg[1:2] in ("'", '"') and seg[1:] == seg[1] + escaped(text) + seg[1]
    try:
        return bool(pyast.literal_eval(seg) == value)
    except (ValueError, SyntaxError):
        return False


def _assert_literals(test: ast.expr, lines: list[str], sympy: frozenset[str] = frozenset()
                     ) -> list[tuple[Edit, ...] | None]:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return []
    nodes = [*_expected(test.comparators[0], sympy), *_expected(test.left, sympy)]
    return [(site,) if (site := literal_site(n, lines)) else None for n in nodes]


def func_name(f: ast.expr) -> str:
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _expected(side: ast.expr, sympy: frozenset[str] = frozenset()) -> list[ast.expr]:
    """Literals inside an expected value whose change changes the value: the value itself, elements of a
    list/tuple/set display, values of a dict display, int arguments of date/time types, keyword arguments of
    a class (``Namespace(query="a")``), the first argument of ``Decimal``, ``Fraction`` and ``approx``, the
    argument of a ``SYMPY_VALUES`` constructor among ``sympy`` (the names the module imports from sympy).
    Never arguments of other calls (``Max(0, 2) == Max(1, 2)``)."""
    if literal_value(side) is not None:
        return [side]
    if isinstance(side, (ast.List, ast.Tuple, ast.Set)):
        return [x for e in side.elts for x in _expected(e, sympy)]
    if isinstance(side, ast.Dict):
        return [x for v in side.values if v is not None for x in _expected(v, sympy)]
    if isinstance(side, ast.BinOp) and isinstance(side.op, (ast.Add, ast.Sub, ast.Mult)):
        return [x for e in (side.left, side.right) for x in _expected(e, sympy)
                if type(literal_value(x)) is int and literal_value(x) not in (0, 1)]
    if isinstance(side, ast.Call):
        name = func_name(side.func)
        if name in DATA_TYPES:
            keys = [k.value for k in side.keywords if k.arg in DATA_KEYWORDS]
            wanted = [*side.args[:DATA_TYPES[name]], *keys]
            return [x for v in wanted for x in _data(v, sympy)]
        out = [a for a in side.args if name in DATE_TYPES and type(literal_value(a)) is int]
        if (name in VALUE_TYPES or (name == "approx" and not side.keywords)) and side.args:
            # the first argument sets the value (a new one is never equal to it: see _distinct)
            out += [a for a in side.args[:1] if type(literal_value(a)) in (int, float, str)]
        if name in sympy and isinstance(side.func, ast.Name) and len(side.args) == 1 and not side.keywords:
            kinds = (int,) if name == "Integer" else (int, float, str)
            out += [a for a in side.args if type(literal_value(a)) in kinds]
        if name[:1].isupper():
            out += [x for k in side.keywords if k.arg for x in _expected(k.value, sympy)]
        return out
    return []


def _asserting(name: str) -> bool:
    """An assertion call that holds only for one value (no ``not``, no tolerance, not about exceptions)."""
    low = name.lower()
    return low.startswith("assert") and not any(w in low for w in ("raise", "warn", "log", "not", "almost"))


def _equality(call: ast.Call) -> bool:
    """An assertion call that holds only when its first two arguments are equal (``assertEqual``, numpy's
    ``assert_equal``, xarray's ``assert_identical``)."""
    low = func_name(call.func).lower()
    return _asserting(low) and ("equal" in low or "identical" in low) and len(call.args) >= 2


def _bound_expected(stmt: ast.stmt, before: Sequence[ast.stmt], sympy: frozenset[str]) -> list[ast.expr]:
    """Literals of an expected value bound to a local name and compared at ``stmt`` (``expected =
    Dataset({"x": 1})`` then ``assert_identical(expected, actual)``): the top-level binding the name last
    had in ``before``, read nowhere since and once in ``stmt`` (so nothing else computes from it)."""
    if isinstance(stmt, ast.Assert):
        test = stmt.test
        ok = isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)
        sides = [test.left, test.comparators[0]] if ok else []  # type: ignore[attr-defined]
    elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and _equality(stmt.value):
        sides = list(stmt.value.args[:2])
    else:
        return []
    out: list[ast.expr] = []
    for side in sides:
        if not isinstance(side, ast.Name) or _uses(stmt, side.id) != 1:
            continue
        for b in reversed(before):  # back to the binding; any use on the way (a read, a store) ends it
            if isinstance(b, ast.Assign) and [getattr(t, "id", None) for t in b.targets] == [side.id]:
                out += _expected(b.value, sympy)
            if _uses(b, side.id):
                break
    return out


def _uses(stmt: ast.AST, name: str) -> int:
    """How often ``stmt`` names ``name`` (read or stored)."""
    return sum(isinstance(n, ast.Name) and n.id == name for n in ast.walk(stmt))


def _data(value: ast.expr, sympy: frozenset[str]) -> list[ast.expr]:
    """Literals of a ``DATA_TYPES`` argument: an xarray variable's ``(dims, data, attrs)`` tuple, as a value
    of a dict display or of ``dict(...)``, gives its dims and data only."""
    if isinstance(value, ast.Call) and func_name(value.func) == "dict" and not value.args:
        values = [k.value for k in value.keywords if k.arg]
    elif isinstance(value, ast.Dict):
        values = [v for v in value.values if v is not None]
    else:
        return _expected(value, sympy)
    return [x for v in values for e in (v.elts[:2] if isinstance(v, ast.Tuple) else [v])
            for x in _expected(e, sympy)]


def _unittest_literals(call: ast.Call, lines: list[str]) -> list[tuple[Edit, ...] | None]:
    """Literals of an assertion call: expected values of an equality (``assertEqual``, numpy's
    ``assert_equal``, xarray's ``assert_identical``), int keywords of a count check (pytest's
    ``assert_outcomes(passed=1)``)."""
    low = func_name(call.func).lower()
    if not _asserting(low):
        return []
    nodes: list[ast.expr] = []
    if _equality(call):
        nodes = [x for a in call.args[:2] for x in _expected(a)]
    elif "outcome" in low:  # pytest's assert_outcomes(passed=1), assertoutcome(passed=1)
        nodes = [k.value for k in call.keywords if type(literal_value(k.value)) is int]
    return [(site,) if (site := literal_site(n, lines)) else None for n in nodes]


_OPS = {ast.Eq: (r"==", "!="), ast.NotEq: (r"!=", "=="),
        ast.Is: (r"\bis\b", "is not"), ast.IsNot: (r"\bis\s+not\b", "is"),
        ast.In: (r"\bin\b", "not in"), ast.NotIn: (r"\bnot\s+in\b", "in")}


def _assert_flip(test: ast.expr, lines: list[str]) -> tuple[Edit, ...] | None:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _OPS):
        return None
    left, right = test.left, test.comparators[0]
    if left.end_lineno != right.lineno or left.end_col_offset is None:
        return None
    raw = lines[right.lineno - 1].encode()
    between = raw[left.end_col_offset:right.col_offset].decode(errors="replace")
    pattern, new = _OPS[type(test.ops[0])]
    flipped = re.sub(pattern, new, between, count=1)
    if flipped == between:
        return None
    return ((left.end_lineno, left.end_col_offset, right.lineno, right.col_offset, flipped),)


SINGLETONS = (None, True, False)
_PLAIN = (ast.Name, ast.Call, ast.Attribute, ast.Subscript)
"""Expressions that take ``not ``, `` is X`` without parentheses."""


def _drops(test: ast.expr, lines: list[str]) -> list[tuple[Edit, ...]]:
    """``x == [a, b]`` to ``x == [a]`` or ``[a, a, b]``, ``[a]`` to ``[]``: a list (or a tuple of three or
    more) display compared with ``==`` loses or repeats one element (a sequence of another length is never
    equal; no added operator for a reader to spot)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return []
    out: list[tuple[Edit, ...]] = []
    for side in (test.left, test.comparators[0]):
        least = 3 if isinstance(side, ast.Tuple) else 1
        if not isinstance(side, (ast.List, ast.Tuple)) or len(side.elts) < least:
            continue
        elts = side.elts
        if any(isinstance(e, ast.Starred) for e in elts):
            continue
        for i, e in enumerate(elts):
            span: Edit
            if len(elts) == 1:  # [x] to []
                span = (e.lineno, e.col_offset, side.end_lineno, side.end_col_offset - 1, "")  # type: ignore[assignment, operator]
            elif i:
                a = elts[i - 1]
                span = (a.end_lineno, a.end_col_offset, e.end_lineno, e.end_col_offset, "")  # type: ignore[assignment]
            else:
                b = elts[1]
                span = (e.lineno, e.col_offset, b.lineno, b.col_offset, "")
            out.append((span,))
            if e.lineno == e.end_lineno:  # [a, b] to [a, a, b]: longer, so length tells nothing either
                at = (e.end_lineno, e.end_col_offset, e.end_lineno, e.end_col_offset)
                out.append(((*at, ", " + _text(lines, e)),))  # type: ignore[arg-type]
    return out


_ORDER = {ast.Lt: ("<", ">", ">="), ast.Gt: (">", "<", "<="), ast.LtE: ("<=", ">"), ast.GtE: (">=", "<")}
"""An order comparison and the ones that fail where it holds (``a < b`` to ``a > b``: no `not` added)."""


def _swaps(test: ast.expr, lines: list[str]) -> list[tuple[Edit, ...]]:
    """Other truth forms of an assertion, each of which fails where the original holds, so that a copy
    does not always carry the added ``not`` (which a reader takes for the copy's): ``E is C`` (C one of
    None, True, False) to ``E is C2``, or to ``E`` when C is falsy, or ``not E`` when C is True; a bare
    ``E`` to ``not E``, ``E is False`` or ``E is None``; ``not E`` to ``E`` or ``E is True``."""
    out: list[tuple[Edit, ...]] = []
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _ORDER:
        left, right = test.left, test.comparators[0]
        if left.end_lineno != right.lineno:
            return []
        old, *news = _ORDER[type(test.ops[0])]
        raw = lines[right.lineno - 1].encode()
        between = raw[left.end_col_offset:right.col_offset].decode(errors="replace")
        if between.count(old) != 1 or "#" in between:
            return []
        edge = (left.end_lineno, left.end_col_offset, right.lineno, right.col_offset)
        out += [((*edge, between.replace(old, new)),) for new in news]  # type: ignore[misc]
    elif isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Is):
        c, e = test.comparators[0], test.left
        if not (isinstance(c, ast.Constant) and any(c.value is x for x in SINGLETONS)):
            return []
        out += [(_span(c, repr(x)),) for x in SINGLETONS if x is not c.value]
        if isinstance(e, _PLAIN) and c.value is not True:
            out.append(((e.end_lineno, e.end_col_offset, c.end_lineno, c.end_col_offset, ""),))  # type: ignore[arg-type]
        if isinstance(e, _PLAIN) and c.value is True:
            out.append(((e.lineno, e.col_offset, e.lineno, e.col_offset, "not "),))
    elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, _PLAIN):
        out += [_negate(test, lines), (_span(test, _text(lines, test.operand) + " is True"),)]
    elif isinstance(test, _PLAIN):
        line, col = test.end_lineno or test.lineno, test.end_col_offset or 0
        out += [_negate(test, lines), *(((line, col, line, col, f" is {x}"),) for x in ("False", "None"))]
    return out


def _negate(test: ast.expr, lines: list[str]) -> tuple[Edit, ...]:
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _text(lines, test.operand)
        if isinstance(test.operand, (ast.BoolOp, ast.IfExp, ast.Lambda, ast.NamedExpr)):
            inner = f"({inner})"
        return (_span(test, inner),)
    if isinstance(test, (ast.Name, ast.Call, ast.Attribute, ast.Subscript)):
        return ((test.lineno, test.col_offset, test.lineno, test.col_offset, "not "),)
    end = (test.end_lineno, test.end_col_offset, test.end_lineno, test.end_col_offset, ")")
    return ((test.lineno, test.col_offset, test.lineno, test.col_offset, "not ("), end)  # type: ignore[return-value]


def _unittest_flip(call: ast.Call) -> tuple[Edit, ...] | None:
    f = call.func
    if not (isinstance(f, ast.Attribute) and f.attr in FLIPS and f.end_lineno == f.lineno):
        return None
    start = f.end_col_offset - len(f.attr.encode())  # type: ignore[operator]
    return ((f.lineno, start, f.lineno, f.end_col_offset, FLIPS[f.attr]),)  # type: ignore[return-value]


def escaped(text: str) -> str:
    """``text`` as a literal spells it between quotes: newlines and tabs escaped."""
    return text.replace("\n", "\\n").replace("\t", "\\t")
