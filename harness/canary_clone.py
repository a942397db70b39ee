"""Canaries cloned from the module's own tests (see ``canary.py`` for the contract).

A must-fail canary is a copy of a real test of the module (one known to pass with the reference fix; a
FAIL_TO_PASS test that test_patch adds when there is one), renamed in the module's naming style, placed
next to one of the tests test_patch adds, with one assertion that ran before made wrong: the expected literal
of an ``==`` replaced by another literal of the same type (one the test or the module already uses, else a
near value), else an ``is``/``in``/unittest assertion turned into its opposite, else a bare ``assert x``
turned into ``assert not x``. The assertion is a top-level statement of the body with no ``return`` before
it, so when the original passes the copy reaches it and fails. A must-pass canary is an unchanged copy under a
new name. Clones keep the original's text (comments, quoting, docstring) but for the edited span.
"""

from __future__ import annotations

import ast
import math
import re
import string
from collections.abc import Sequence
from random import Random

from .canary_place import apply_inserts, name_for, spot, vocabulary
from .canary_types import Canary, Edit, Known, Planting, Source, Style

SKIPS = frozenset({"skip", "skipTest", "importorskip", "xfail", "fail"})
"""Calls that end a test before an assertion: none may run before the edited one."""
OWN_STATE = frozenset({"request", "pytester", "testdir", "tester"})
"""Fixtures through which a test sees its own name or output: no unchanged copy of such a test."""
FLIPS = {
    "assertTrue": "assertFalse", "assertFalse": "assertTrue", "assertIsNone": "assertIsNotNone",
    "assertIsNotNone": "assertIsNone", "assertIn": "assertNotIn", "assertNotIn": "assertIn",
    "assertIs": "assertIsNot", "assertIsNot": "assertIs", "assertIsInstance": "assertNotIsInstance",
    "assertNotIsInstance": "assertIsInstance",
}
DATE_TYPES = frozenset({"date", "datetime", "time", "timedelta"})
LITERAL_TYPES = (int, float, str, bytes)
def plant(module: str, text: str, style: Style, rng: Random, count: tuple[int, int] | None,
          known: Known | None, taken: set[str]) -> Planting | None:
    """Cloned canaries in ``text``; None when the module has no test to derive a must-fail canary from."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    lines = text.splitlines(keepends=True)
    sources = _sources(tree, module, style, known, lines)
    failing = [s for s in sources if s.sites]
    if not failing:
        return None
    best = min(s.tier for s in failing)
    pool = [s for s in failing if s.tier == best]
    # a flipped operator or an added `not` singles the copy out; a changed value does not
    pool = [s for s in pool if _is_literal(s.sites[0], lines)] or pool
    if count is None:
        # copies of tests the repository has are recognisable (their twin is there): a few only
        top = min(len(pool), 8 if best <= 1 else 2)
        n_sources = top if top <= 4 else rng.randint(min((len(pool) + 1) // 2, top), top)
        sites = {id(s): _best_site(s, lines, tree, rng) for s in pool}
        # sources whose best site takes a value that looks like the old one go first
        ranked = sorted(rng.sample(pool, len(pool)), key=lambda s: sites[id(s)][0])
        chosen = [(s, sites[id(s)][1]) for s in ranked[:n_sources]]
        fails = [(s, site) for s, site in chosen
                 for _ in range(_copies(site, lines, rng) if best <= 1 else 1)]
        n_pass = rng.choice((0, 0, 1, 1, 2))
    else:
        n_pass = count[0]
        fails = [(s, rng.choice(s.sites)) for s in _pick(pool, count[1], rng)]
    used = {id(s) for s, _ in fails}
    # an unchanged copy of a source that also has an altered one would single the altered one out
    spare = [s for s in sources if s.copyable and id(s) not in used and s.tier <= 1]
    if count is not None and not spare:
        spare = [s for s in sources if s.copyable]
    copies = _pick(spare, n_pass, rng) if spare else []
    vocab = vocabulary(tree)
    values: dict[int, list[str]] = {}
    inserts, canaries = [], []
    for s, site, must_pass in [*((s, site, False) for s, site in fails), *((s, (), True) for s in copies)]:
        name = name_for(s.node.name, vocab, s.node, rng, taken)
        edits = [_choose_value(e, lines, s, tree, rng, values.setdefault(id(site), [])) for e in site]
        inserts.append((_render(s, edits, name, lines), spot(s, sources, tree, known, module, style, rng)))
        canaries.append(Canary(name, must_pass, module))
    return Planting(tuple(canaries), apply_inserts(lines, inserts), derived=True, hidden=best <= 1)


def _copies(site: tuple[Edit, ...], lines: list[str], rng: Random) -> int:
    """Altered copies of one test, all at one site with distinct values: a group whose members differ
    pairwise in that one value, the real test anywhere in it (a flip or negation has one alternative)."""
    return rng.choice((1, 2, 2, 3)) if _is_literal(site, lines) else 1


def _best_site(s: Source, lines: list[str], tree: ast.Module, rng: Random) -> tuple[int, tuple[Edit, ...]]:
    """(how much its best new value differs from the old one to a reader, site) for one of the source's
    sites among those whose best new value looks most like the old one."""
    if not _is_literal(s.sites[0], lines):
        return 50, rng.choice(s.sites)
    quality = []
    for site in s.sites:
        found = _candidates(site[0], lines, s, tree, rng)
        quality.append((found[0][0] if found else 99, site))
    top = min(q for q, _ in quality)
    return top, rng.choice([site for q, site in quality if q == top])


def _is_literal(site: tuple[Edit, ...], lines: list[str]) -> bool:
    """A literal replacement (its edit holds the old literal's text), not a flip or a negation."""
    line, c1, line2, c2, text = site[0]
    old = lines[line - 1].encode()[c1:c2].decode(errors="replace") if line == line2 else None
    return len(site) == 1 and old == text


def _pick(pool: Sequence[Source], n: int, rng: Random) -> list[Source]:
    """``n`` sources, distinct while the pool lasts (repeats only when more are asked than there are)."""
    out: list[Source] = []
    while len(out) < n and pool:
        out += rng.sample(list(pool), min(len(pool), n - len(out)))
    return out


# ------------------------------------------------------------------------------------------ sources


def _tests(tree: ast.Module, style: Style) -> list[tuple[ast.FunctionDef, ast.ClassDef | None]]:
    out: list[tuple[ast.FunctionDef, ast.ClassDef | None]] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and style != "unittest" and node.name.startswith("test"):
            out.append((node, None))
        elif isinstance(node, ast.ClassDef) and not node.decorator_list and (
                node.bases if style == "unittest" else style == "function" and node.name.startswith("Test")):
            out += [(f, node) for f in node.body
                    if isinstance(f, ast.FunctionDef) and f.name.startswith("test")]
    return out


def _sources(tree: ast.Module, module: str, style: Style, known: Known | None, lines: list[str]
             ) -> list[Source]:
    out = []
    for node, cls in _tests(tree, style):
        cname = cls.name if cls else None
        if node.decorator_list or _is_generator(node):
            continue
        if known is not None and not known.listed(known.passing, module, cname, node.name):
            continue
        if known is None and _calls(node.body, SKIPS):
            continue
        tier = 3
        if known is not None:
            added = (module, node.name) in known.added
            failing = known.listed(known.failing, module, cname, node.name)
            tier = 0 if added and failing else 1 if added else 2 if failing else 3
        else:
            tier = 0
        sites = tuple(_sites(node, lines, tree))
        out.append(Source(node, cls, tier, sites, _copyable(node)))
    return out


def _is_generator(node: ast.FunctionDef) -> bool:
    return any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in ast.walk(node))


def _calls(stmts: Sequence[ast.stmt], names: frozenset[str]) -> bool:
    for stmt in stmts:
        for n in ast.walk(stmt):
            if isinstance(n, ast.Call):
                f = n.func
                name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                if name in names:
                    return True
    return False


def _copyable(node: ast.FunctionDef) -> bool:
    args = {a.arg for a in [*node.args.args, *node.args.kwonlyargs]}
    mentions = any(isinstance(n, ast.Constant) and isinstance(n.value, str) and node.name in n.value
                   for n in ast.walk(node))
    return not (args & OWN_STATE) and not mentions


# ------------------------------------------------------------------------------------------ sites


def _body(node: ast.FunctionDef) -> list[ast.stmt]:
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        return body[1:]
    return body


def _sites(node: ast.FunctionDef, lines: list[str], tree: ast.Module) -> list[tuple[Edit, ...]]:
    """Edits that make ``node`` fail, literal replacements first, then flips, then negations."""
    literal, flip, negate = [], [], []
    for i, stmt in enumerate(_body(node)):
        before = _body(node)[:i]
        if any(isinstance(n, ast.Return) for s in before for n in ast.walk(s)) or _calls(before, SKIPS):
            break
        if isinstance(stmt, ast.Assert):
            literal += [e for e in _assert_literals(stmt.test, lines) if e]
            flip += [e for e in [_assert_flip(stmt.test, lines)] if e]
            if not isinstance(stmt.test, ast.Compare):
                negate.append(_negate(stmt.test, lines))
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            literal += [e for e in _unittest_literals(stmt.value, lines) if e]
            flip += [e for e in [_unittest_flip(stmt.value)] if e]
    return literal or flip or negate


def _literal_value(n: ast.AST) -> object | None:
    if isinstance(n, ast.Constant) and type(n.value) in LITERAL_TYPES:
        return n.value
    if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub) and isinstance(n.operand, ast.Constant):
        value = n.operand.value
        if type(value) in (int, float):
            return -value  # type: ignore[operator]
    return None


def _plain(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (str, bytes)):
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        return len(text) <= 60 and all(c in string.printable and c not in "\\'\"\n\r\t\x0b\x0c" for c in text)
    return True


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


def _literal_site(n: ast.AST, lines: list[str]) -> Edit | None:
    value = _literal_value(n)
    seg = _segment(lines, n)
    if value is None or seg is None or not _plain(value) or not _simple_literal(seg, value):
        return None
    return _span(n, seg)  # the new value is chosen when the clone is rendered (see _render)


def _simple_literal(seg: str, value: object) -> bool:
    if isinstance(value, str):
        return len(seg) == len(value) + 2 and seg[0] in "'\"" and seg[-1] == seg[0]
    if isinstance(value, bytes):
        return len(seg) == len(value) + 3 and seg[0] in "bB" and seg[1] in "'\"" and seg[-1] == seg[1]
    try:
        return bool(ast.literal_eval(seg) == value)
    except (ValueError, SyntaxError):
        return False


def _assert_literals(test: ast.expr, lines: list[str]) -> list[tuple[Edit, ...] | None]:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return []
    nodes = [*_expected(test.comparators[0]), *_expected(test.left)]
    return [(site,) if (site := _literal_site(n, lines)) else None for n in nodes]


def _func_name(f: ast.expr) -> str:
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _expected(side: ast.expr) -> list[ast.expr]:
    """Literals inside an expected value whose change changes the value: the value itself, elements of a
    list/tuple/set display, values of a dict display, int arguments of date/time types, keyword arguments of
    a class (``Namespace(query="a")``). Never arguments of other calls (``Max(0, 2) == Max(1, 2)``)."""
    if _literal_value(side) is not None:
        return [side]
    if isinstance(side, (ast.List, ast.Tuple, ast.Set)):
        return [x for e in side.elts for x in _expected(e)]
    if isinstance(side, ast.Dict):
        return [x for v in side.values if v is not None for x in _expected(v)]
    if isinstance(side, ast.BinOp) and isinstance(side.op, (ast.Add, ast.Sub, ast.Mult)):
        return [x for e in (side.left, side.right) for x in _expected(e)
                if type(_literal_value(x)) is int and _literal_value(x) not in (0, 1)]
    if isinstance(side, ast.Call):
        name = _func_name(side.func)
        out = [a for a in side.args if name in DATE_TYPES and type(_literal_value(a)) is int]
        if name[:1].isupper():
            out += [x for k in side.keywords if k.arg for x in _expected(k.value)]
        return out
    return []


def _unittest_literals(call: ast.Call, lines: list[str]) -> list[tuple[Edit, ...] | None]:
    """Literals of an assertion call: expected values of an equality (``assertEqual``, numpy's
    ``assert_equal``), int keywords of a count check (pytest's ``assert_outcomes(passed=1)``)."""
    name = _func_name(call.func)
    low = name.lower()
    if not low.startswith("assert") or any(w in low for w in ("raise", "warn", "log", "not", "almost")):
        return []
    nodes: list[ast.expr] = []
    if "equal" in low and len(call.args) >= 2:
        nodes = [x for a in call.args[:2] for x in _expected(a)]
    elif "outcomes" in low:
        nodes = [k.value for k in call.keywords if type(_literal_value(k.value)) is int]
    return [(site,) if (site := _literal_site(n, lines)) else None for n in nodes]


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


# ------------------------------------------------------------------------------------------ rendering


def _render(s: Source, edits: list[Edit], name: str, lines: list[str]) -> str:
    """The clone's text: the source's lines, renamed, with ``edits`` applied."""
    node = s.node
    start, end = node.lineno, node.end_lineno or node.lineno
    head = lines[node.lineno - 1]
    col = head.encode().find(f"def {node.name}".encode())
    edits = [*edits, (node.lineno, col + 4, node.lineno, col + 4 + len(node.name.encode()), name)]
    chunk = [line.encode() for line in lines[start - 1:end]]
    for line, c1, line2, c2, new in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        a, b = line - start, line2 - start
        chunk[a:b + 1] = [chunk[a][:c1] + new.encode() + chunk[b][c2:]]
    text = b"".join(chunk).decode()
    return text if text.endswith("\n") else text + "\n"


def _choose_value(e: Edit, lines: list[str], s: Source, tree: ast.Module, rng: Random, taken: list[str]
                  ) -> Edit:
    """A literal site (its text is the old literal) gets a new value, distinct from the values ``taken`` by
    other copies of the site; flips and negations are as is (see :func:`_candidates`)."""
    line, c1, line2, c2, text = e
    if not _is_literal((e,), lines):
        return e
    for _, spelled in _candidates(e, lines, s, tree, rng):
        if spelled not in taken:
            taken.append(spelled)
            return (line, c1, line2, c2, spelled)
    return (line, c1, line2, c2, _spell(_mutate(ast.literal_eval(text), rng, []), text))


def _candidates(e: Edit, lines: list[str], s: Source, tree: ast.Module, rng: Random) -> list[tuple[int, str]]:
    """New values for a literal site, best first, each with how much it differs from the old one to a
    reader (:func:`_looks`: used elsewhere in the test or not, about as common in the module's text, about as
    long); drawn from the module's literals and from near values (a number moved a little; in a string, a
    word swapped for another word of the module). Otherwise how often a value recurs would tell the copy
    from the original."""
    text = e[4]
    value = ast.literal_eval(text)
    in_test, in_module = _literals_all(s.node), _literals_all(tree)
    module = "".join(lines)
    words = _words(tree)
    want = _looks(value, in_test, module, own=True)
    pool = list(dict.fromkeys([*(v for v in in_module if type(v) is type(value) and _plain(v)),
                               *(_mutate(value, rng, words) for _ in range(40))]))
    rng.shuffle(pool)
    scored = [(_mismatch(_looks(v, in_test, module, own=False), want), _spell(v, text)) for v in pool
              if v != value]
    scored = [x for x in scored if x[1] != text]
    scored.sort(key=lambda x: x[0])
    return scored


def _looks(value: object, in_test: list[object], module: str, own: bool) -> tuple[int, int, int]:
    """What a reader can see of a value: whether the test uses it elsewhere, how often its text occurs in
    the module (capped), its length class. ``own``: ``value`` is the test's own (one use is the site)."""
    uses = _count(in_test, value) - own
    core = value.decode("latin-1") if isinstance(value, bytes) else str(value)
    seen = module.count(core) - own
    return (min(uses, 1), min(seen, 3), min(len(core), 12) // 4)


def _mismatch(a: tuple[int, int, int], b: tuple[int, int, int]) -> int:
    return 4 * abs(a[0] - b[0]) + 2 * abs(a[1] - b[1]) + abs(a[2] - b[2])


def _count(values: list[object], value: object) -> int:
    return sum(1 for v in values if type(v) is type(value) and v == value)


def _literals_all(root: ast.AST) -> list[object]:
    return [v for n in ast.walk(root) if (v := _literal_value(n)) is not None]


def _words(tree: ast.Module) -> list[str]:
    """Words of the module's strings and names, to swap a word of a string for."""
    found: list[str] = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            found += re.findall(r"[A-Za-z]{3,}", n.value)
        elif isinstance(n, ast.Name):
            found += re.findall(r"[a-z]{3,}", n.id)
    return list(dict.fromkeys(w.lower() for w in found))


def _mutate(value: object, rng: Random, words: list[str]) -> object:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        new = value + rng.choice((1, -1, 2, -2, 3)) if value else rng.choice((1, 2))
        new = abs(new) if value >= 0 else new
        return new if new != value else value + 1  # 1 - 2 = -1, whose abs is 1 again
    if isinstance(value, float):
        return value + rng.choice((0.5, -0.5, 1.0, 0.25)) if value else 1.0
    if isinstance(value, bytes):
        return _mutate(value.decode("latin-1"), rng, words).encode("latin-1")  # type: ignore[attr-defined]
    text = str(value)
    spots = list(re.finditer(r"[A-Za-z]{3,}", text))
    if spots and words and rng.random() < 0.8:
        m = rng.choice(spots)
        word = rng.choice(words)
        old = m.group()
        word = word.upper() if old.isupper() else word.capitalize() if old[0].isupper() else word
        if word != old:
            return text[:m.start()] + word + text[m.end():]
    if not text:
        return rng.choice(string.ascii_lowercase)
    i = rng.randrange(len(text))
    c = text[i]
    alphabet = (string.digits if c.isdigit() else string.ascii_uppercase if c.isupper()
                else string.ascii_lowercase if c.isalpha() else " .,-_:")
    choices = [a for a in alphabet if a != c] or ["x"]
    return text[:i] + rng.choice(choices) + text[i + 1:]


def _spell(value: object, like: str) -> str:
    """``value`` written as ``like`` writes its literal (same quotes)."""
    if isinstance(value, str):
        q = like[0] if like[:1] in ("'", '"') else "'"
        return f"{q}{value}{q}" if q not in value and "\\" not in value else repr(value)
    if isinstance(value, bytes):
        q = like[1] if like[1:2] in ("'", '"') else "'"
        text = value.decode("latin-1")
        return f"b{q}{text}{q}" if _plain(value) and q not in text else repr(value)
    return repr(value)
