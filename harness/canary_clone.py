"""Canaries cloned from the module's own tests (see ``canary.py`` for the contract).

A must-fail canary is a copy of a real test of the module (one known to pass with the reference fix; a
test that test_patch adds when there is one), renamed in the module's naming style, placed among the tests
test_patch adds, with one assertion that ran before made wrong: the expected literal of an ``==`` replaced by
another literal of the same type (one the test or the module already uses, else a near value; never one
``pytest.approx`` or ``Decimal`` would take for equal; where the test uses that value at several expected
literals and nowhere else, possibly the same new value at each, so that the copy uses its value as often as
the original uses its own: :func:`value_sites`), else an element of an expected list display dropped or
repeated, else the exception class of a ``raises(E, ...)`` swapped, else the assertion in another form that
fails where it holds (``canary_sites.py``; one without an added ``not`` where there is one), else an
``==``/``in``/unittest assertion turned into its opposite, else ``assert x`` into ``assert not x``. The
assertion is a top-level statement of the body with no ``return`` before it, so when the original passes the
copy reaches it and fails. A must-pass canary is an unchanged copy under a new name; when the sources are
tests test_patch adds, every such test without a must-fail copy gets one. Clones keep the original's text
(comments, quoting, docstring, pytest marks) but for the edited span.
"""

from __future__ import annotations

import ast
import re
import string
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from random import Random

from envfarm import pyast

from .canary_place import apply_inserts, group_names, group_spots, vocabulary
from .canary_sites import SKIPS, calls, escaped, failure_sites, is_raw, literal_value, plain, raw_plain
from .canary_types import Canary, Edit, Known, Planting, Source, Style

OWN_STATE = frozenset({"request", "pytester", "testdir", "tester"})
"""Fixtures through which a test sees its own name or output: no unchanged copy of such a test."""
MARK_DENY = frozenset({"parametrize", "skip", "skipif", "xfail"})
"""pytest marks a copied test may not carry: a copy would be skipped, expected to fail, or run once per
parameter (where only some instances may pass)."""


def plant(module: str, text: str, style: Style, rng: Random, count: tuple[int, int] | None,
          known: Known | None, taken: set[str]) -> Planting | None:
    """Cloned canaries in ``text``; None when the module has no test to derive a must-fail canary from."""
    try:
        tree = pyast.parse(text)
    except (SyntaxError, ValueError):
        return None
    lines = text.splitlines(keepends=True)
    sources = _sources(tree, module, style, known, lines)
    failing = [s for s in sources if s.sites]
    if not failing:
        return None
    best = min(s.tier for s in failing)
    hidden = best <= 1
    # copies of tests test_patch adds: all of them are sources, so that no new test is left without a twin
    pool = [s for s in failing if (s.tier <= 1 if hidden else s.tier == best)]
    # a flipped operator or an added `not` singles the copy out; a changed value does not
    pool = [s for s in pool if is_literal(s.sites[0], lines)] or pool
    if count is None:
        # copies of tests the repository has are recognisable (their twin is there): a few only
        top = min(len(pool), 8 if hidden else 2)
        n_sources = top if top <= 4 else rng.randint(min((len(pool) + 1) // 2, top), top)
        sites = {id(s): _best_site(s, lines, tree, rng) for s in pool}
        # sources whose best site takes a value that looks like the old one go first
        ranked = sorted(rng.sample(pool, len(pool)), key=lambda s: sites[id(s)][0])
        chosen = [(s, sites[id(s)][1]) for s in ranked[:n_sources]]
        fails = [(s, site) for s, site in chosen for _ in range(_copies(site, lines, rng) if hidden else 1)]
    else:
        fails = [(s, rng.choice(s.sites)) for s in _pick(pool, count[1], rng)]
    used = {id(s) for s, _ in fails}
    # an unchanged copy of a source that also has an altered one would single the altered one out
    spare = [s for s in sources if s.copyable and id(s) not in used and s.tier <= 1]
    if count is not None and not spare:
        spare = [s for s in sources if s.copyable]
    if count is not None:
        copies = _pick(spare, count[0], rng) if spare else []
    elif hidden:
        # every new test without an altered copy gets an unchanged one (a test with no twin would be real)
        copies = [s for s in spare for _ in range(rng.choice((1, 1, 2)))]
    else:
        copies = _pick(spare, rng.choice((0, 0, 1, 1, 2)), rng) if spare else []
    vocab = vocabulary(tree)
    values: dict[int, list[str]] = {}
    groups: dict[int, list[tuple[Source, tuple[Edit, ...], bool]]] = {}
    for s, site, must_pass in [*((s, site, False) for s, site in fails), *((s, (), True) for s in copies)]:
        groups.setdefault(id(s), []).append((s, site, must_pass))
    inserts, canaries = [], []
    for members in groups.values():
        s = members[0][0]
        names = group_names(s.node.name, len(members), vocab, s.node, tree, rng, taken)
        places = group_spots(s, len(members), sources, tree, known, module, style, rng)
        for (_, site, must_pass), name, place in zip(members, names, places, strict=True):
            edits = choose_values(site, lines, s.node, tree, rng, values.setdefault(id(site), []))
            inserts.append((_render(s, edits, name, lines), place))
            canaries.append(Canary(name, must_pass, module))
    rng.shuffle(canaries)
    return Planting(tuple(canaries), apply_inserts(lines, inserts), derived=True, hidden=hidden)


def _copies(site: tuple[Edit, ...], lines: list[str], rng: Random) -> int:
    """Altered copies of one test, all at one site with distinct values: a group whose members differ
    pairwise in that one value, the real test anywhere in it (a flip or negation has one alternative)."""
    return rng.choice((1, 2, 2, 3)) if is_literal(site, lines) else 1


def _best_site(s: Source, lines: list[str], tree: ast.Module, rng: Random) -> tuple[int, tuple[Edit, ...]]:
    """(how much its best new value differs from the old one to a reader, site) for one of the source's
    sites among those whose best new value looks most like the old one."""
    if not is_literal(s.sites[0], lines):
        # a copy that is always the longer of the pair (an added `not`, `is False`) or always the shorter
        # is told by its length: as often a site that shortens the test as one that lengthens it
        # and without an added `not` (or `!=`, `not in`, `assertNot...`) where another form fails as well:
        # the member of a twin pair with the negated form is the copy to a reader
        sites = [site for site in s.sites if not negating(site, lines)] or list(s.sites)
        growth = [_growth(site, lines) for site in sites]
        want = rng.choice((min, max))(growth)
        return 50, rng.choice([site for site, g in zip(sites, growth, strict=True) if g == want])
    quality = []
    for site in value_sites(s.sites, s.node, lines):
        found = _candidates(site[0], lines, s.node, tree, rng, own=len(site))
        quality.append((found[0][0] if found else 99, site))
    top = min(q for q, _ in quality)
    return top, rng.choice([site for q, site in quality if q == top])


NEGATION = re.compile(r"\bnot\b|!=|assertNot|assertFalse|assertIsNot")


def negating(site: tuple[Edit, ...], lines: list[str]) -> bool:
    """The edits write a negation (``not``, ``!=``, ``assertNot...``) the replaced text does not have."""
    return any(len(NEGATION.findall(text)) > len(NEGATION.findall(_text_span(lines, *span)))
               for *span, text in site)


def _growth(site: tuple[Edit, ...], lines: list[str]) -> int:
    """-1, 0 or 1: whether the edits shorten, keep or lengthen the test's text."""
    delta = 0
    for line, c1, line2, c2, text in site:
        old = len(_text_span(lines, line, c1, line2, c2))
        delta += len(text) - old
    return (delta > 0) - (delta < 0)


def _text_span(lines: list[str], line: int, c1: int, line2: int, c2: int) -> str:
    chunk = [x.encode() for x in lines[line - 1:line2]]
    if len(chunk) == 1:
        return chunk[0][c1:c2].decode(errors="replace")
    chunk[0], chunk[-1] = chunk[0][c1:], chunk[-1][:c2]
    return b"".join(chunk).decode(errors="replace")


def is_literal(site: tuple[Edit, ...], lines: list[str]) -> bool:
    """A literal replacement (its edits hold the old literal's text, one literal or several spelled alike:
    :func:`value_sites`), not a flip or a negation."""
    return bool(site) and all(text == site[0][4] and line == line2 and _text_span(lines, line, c1, line, c2)
                              == text for line, c1, line2, c2, text in site)


def value_sites(sites: Sequence[tuple[Edit, ...]], node: ast.FunctionDef, lines: list[str]
                ) -> list[tuple[Edit, ...]]:
    """``sites`` and, for each literal whose value the test uses elsewhere only at other literal sites of
    ``sites`` spelled alike, those literals together (one site that gives them one new value). A value
    changed at one of its uses alone is used elsewhere in the original and nowhere else in the copy, which
    tells the copy to a reader; changed at all of them, the copy uses its value as often as the original
    does its own. All the sites are expected literals of assertions the test reaches, so the copy still
    fails at the first of them."""
    literal = [site for site in sites if len(site) == 1 and is_literal(site, lines)]
    out, seen = list(sites), set()
    in_test = _literals_all(node)
    for (e,) in literal:
        alike = tuple(x for (x,) in literal if x[4] == e[4])
        if len(alike) < 2 or alike in seen:
            continue
        seen.add(alike)
        try:
            value = pyast.literal_eval(e[4])
        except (SyntaxError, ValueError):
            continue
        if _count(in_test, value) == len(alike):
            out.append(alike)
    return out


def _pick(pool: Sequence[Source], n: int, rng: Random) -> list[Source]:
    """``n`` sources, distinct while the pool lasts (repeats only when more are asked than there are)."""
    out: list[Source] = []
    while len(out) < n and pool:
        out += rng.sample(list(pool), min(len(pool), n - len(out)))
    return out


# ------------------------------------------------------------------------------------------ sources


def _tests(tree: ast.Module, style: Style) -> list[tuple[ast.FunctionDef, ast.ClassDef | None]]:
    out: list[tuple[ast.FunctionDef, ast.ClassDef | None]] = []
    cases = testcase_classes(tree)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and style != "unittest" and node.name.startswith("test"):
            out.append((node, None))
        elif isinstance(node, ast.ClassDef) and not node.decorator_list and (
                node.bases if style == "unittest"
                else style == "function" and (node.name.startswith("Test") or node.name in cases)):
            out += [(f, node) for f in node.body
                    if isinstance(f, ast.FunctionDef) and f.name.startswith("test")]
    return out


def testcase_classes(tree: ast.Module) -> set[str]:
    """Top-level classes that derive from a ``TestCase`` (a base named ``...TestCase``, or a class of the
    module that does): pytest collects them whatever their name (requests' ``RequestsTestCase``, sphinx's
    ``NumpyDocstringTest``)."""
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    found: set[str] = set()
    grew = True
    while grew:
        grew = False
        for c in classes:
            names = {_base_name(b) for b in c.bases}
            if c.name not in found and any(n.endswith("TestCase") or n in found for n in names):
                found.add(c.name)
                grew = True
    return found


def _base_name(base: ast.expr) -> str:
    return base.attr if isinstance(base, ast.Attribute) else base.id if isinstance(base, ast.Name) else ""


def plain_marks(node: ast.FunctionDef) -> bool:
    """Every decorator is a pytest mark that neither skips, expects a failure nor multiplies the test
    (``@pytest.mark.sphinx('html', testroot=...)``, ``@pytest.mark.usefixtures(...)``): a copy under it runs
    once and passes or fails like its original."""
    return all(_mark_name(d) not in (None, *MARK_DENY) for d in node.decorator_list)


def _mark_name(d: ast.expr) -> str | None:
    """``X`` of a ``pytest.mark.X`` / ``mark.X`` decorator, called or not; None for any other decorator."""
    f = d.func if isinstance(d, ast.Call) else d
    if not isinstance(f, ast.Attribute):
        return None
    owner = f.value
    if isinstance(owner, ast.Attribute) and owner.attr == "mark" and isinstance(owner.value, ast.Name) and (
            owner.value.id == "pytest"):
        return f.attr
    return f.attr if isinstance(owner, ast.Name) and owner.id == "mark" else None


def _sources(tree: ast.Module, module: str, style: Style, known: Known | None, lines: list[str]
             ) -> list[Source]:
    out = []
    for node, cls in _tests(tree, style):
        cname = cls.name if cls else None
        if not plain_marks(node) or _is_generator(node):
            continue
        if known is not None and not known.listed(known.passing, module, cname, node.name):
            continue
        if known is None and calls(node.body, SKIPS):
            continue
        tier = 3
        if known is not None:
            added = (module, node.name) in known.added
            failing = known.listed(known.failing, module, cname, node.name)
            tier = 0 if added and failing else 1 if added else 2 if failing else 3
        else:
            tier = 0
        found = tuple(failure_sites(node, lines, tree))
        out.append(Source(node, cls, tier, found, _copyable(node)))
    return out


def _is_generator(node: ast.FunctionDef) -> bool:
    return any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in ast.walk(node))


def _copyable(node: ast.FunctionDef) -> bool:
    args = {a.arg for a in [*node.args.args, *node.args.kwonlyargs]}
    mentions = any(isinstance(n, ast.Constant) and isinstance(n.value, str) and node.name in n.value
                   for n in ast.walk(node))
    return not (args & OWN_STATE) and not mentions


# ------------------------------------------------------------------------------------------ rendering


def _render(s: Source, edits: list[Edit], name: str, lines: list[str]) -> str:
    """The clone's text: the source's lines, renamed, with ``edits`` applied."""
    node = s.node
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    end = node.end_lineno or node.lineno
    head = lines[node.lineno - 1]
    col = head.encode().find(f"def {node.name}".encode())
    edits = [*edits, (node.lineno, col + 4, node.lineno, col + 4 + len(node.name.encode()), name)]
    chunk = [line.encode() for line in lines[start - 1:end]]
    for line, c1, line2, c2, new in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        a, b = line - start, line2 - start
        chunk[a:b + 1] = [chunk[a][:c1] + new.encode() + chunk[b][c2:]]
    text = b"".join(chunk).decode()
    return text if text.endswith("\n") else text + "\n"


def choose_values(site: tuple[Edit, ...], lines: list[str], node: ast.FunctionDef, tree: ast.Module,
                  rng: Random, taken: list[str]) -> list[Edit]:
    """The edits of ``site`` as a copy makes them: a literal site's one new value (:func:`choose_value`) at
    each of its literals; a flip or a negation as is."""
    if not is_literal(site, lines):
        return list(site)
    value = choose_value(site[0], lines, node, tree, rng, taken, own=len(site))[4]
    return [(line, c1, line2, c2, value) for line, c1, line2, c2, _ in site]


def choose_value(e: Edit, lines: list[str], node: ast.FunctionDef, tree: ast.Module, rng: Random,
                 taken: list[str], own: int = 1) -> Edit:
    """A literal site of test ``node`` (its text is the old literal) gets a new value, distinct from the
    values ``taken`` by other copies of the site (the new one is added); flips and negations are as is (see
    :func:`_candidates`; ``own``: how many of the test's literals take the new value). Also the
    differential check's decoys (``differential.py``)."""
    line, c1, line2, c2, text = e
    if not is_literal((e,), lines):
        return e
    for _, spelled in _candidates(e, lines, node, tree, rng, own):
        if spelled not in taken:
            taken.append(spelled)
            return (line, c1, line2, c2, spelled)
    value = pyast.literal_eval(text)
    for _ in range(100):
        new = _mutate(value, rng, [])
        if _distinct(value, new) and _spell(new, text) not in taken:
            break
    else:
        new = _far(value, taken, text)
    taken.append(_spell(new, text))
    return (line, c1, line2, c2, _spell(new, text))


def used_alike(e: Edit, spelled: str, node: ast.FunctionDef, own: int = 1) -> bool:
    """Whether ``spelled``, a new value for literal site ``e`` of test ``node`` (and for ``own`` - 1 more
    literals alike: :func:`value_sites`), is used elsewhere in the test exactly when the old value is: a
    reader of a copy and its original compares the two, and a value only the copy's site has marks the
    copy."""
    try:
        old, new = pyast.literal_eval(e[4]), pyast.literal_eval(spelled)
    except (SyntaxError, ValueError):
        return True
    in_test = _literals_all(node)
    return min(_count(in_test, old) - own, 1) == min(_count(in_test, new), 1)


def _candidates(e: Edit, lines: list[str], node: ast.FunctionDef, tree: ast.Module, rng: Random, own: int = 1
                ) -> list[tuple[int, str]]:
    """New values for a literal site, best first, each with how much it differs from the old one to a
    reader (:func:`_looks`: used elsewhere in the test or not, about as common in the module's text, about as
    long); drawn from the module's literals and from near values (a number moved a little; in a string, a
    word swapped for another word of the module). Otherwise how often a value recurs would tell the copy
    from the original."""
    text = e[4]
    value = pyast.literal_eval(text)
    in_test, module = _literals_all(node), _facts(tree, lines)
    want = _looks(value, in_test, module, own=own)
    spelled = raw_plain if is_raw(text) else plain  # a raw literal takes the module's raw strings too
    pool = list(dict.fromkeys([*module.like(value, spelled),
                               *(_mutate(value, rng, module.words) for _ in range(40))]))
    rng.shuffle(pool)
    scored = [(_mismatch(_looks(v, in_test, module, own=0), want), _spell(v, text)) for v in pool
              if _distinct(value, v)]
    scored = [x for x in scored if x[1] != text]
    scored.sort(key=lambda x: x[0])
    return scored


def _distinct(old: object, new: object) -> bool:
    """``new`` can take ``old``'s place without comparing equal to what ``old`` matched: another value of its
    type, a number outside ``pytest.approx``'s default tolerance, a number in a string (``Decimal("3")``)
    that is another number."""
    if type(old) is not type(new) or old == new:
        return False
    if isinstance(old, (int, float)) and not isinstance(old, bool):
        x, y = float(old), float(new)  # type: ignore[arg-type]
        return abs(y - x) > 1e-12 and abs(y - x) > 1e-6 * max(abs(x), abs(y))
    if isinstance(old, str) and isinstance(new, str):
        # a Fraction of a string with an exponent builds the whole power ("1e-9999999" takes minutes), so
        # only a string with a slash is read as one; Decimal keeps the exponent apart
        kind = Fraction if "/" in old + new else Decimal
        try:
            a, b = kind(old.strip()), kind(new.strip())
        except (ArithmeticError, ValueError, TypeError):
            return True
        return bool(a != b)
    return True


@dataclass(frozen=True)
class _Module:
    """What value choice reads of a whole module, once per module (a test module of thousands of lines has
    hundreds of literal sites, each weighing dozens of values)."""

    literals: list[object]
    words: list[str]
    text: str
    counts: dict[str, int] = field(default_factory=dict)
    """How often a value's text occurs in :attr:`text`, as asked."""
    kinds: dict[tuple[type, Callable[[object], bool]], list[object]] = field(default_factory=dict)
    """The distinct literals of a type a spelling takes, as asked."""

    def like(self, value: object, spelled: Callable[[object], bool]) -> list[object]:
        """The module's distinct literals of ``value``'s type that ``spelled`` takes, in order."""
        key = (type(value), spelled)
        if key not in self.kinds:
            self.kinds[key] = list(dict.fromkeys(v for v in self.literals if type(v) is type(value)
                                                 and spelled(v)))
        return self.kinds[key]

    def occurs(self, core: str) -> int:
        if core not in self.counts:
            self.counts[core] = self.text.count(core)
        return self.counts[core]


_MODULES: dict[int, tuple[ast.Module, list[str], _Module]] = {}
"""The last few modules' :class:`_Module`, by ``id`` of their tree (checked to be that tree and lines)."""


_MODULES_LOCK = threading.Lock()
"""Graded runs plant in threads (``run.py``)."""


def _facts(tree: ast.Module, lines: list[str]) -> _Module:
    with _MODULES_LOCK:
        found = _MODULES.get(id(tree))
        if found is not None and found[0] is tree and found[1] is lines:
            return found[2]
    facts = _Module(_literals_all(tree), _words(tree), "".join(lines))
    with _MODULES_LOCK:
        while len(_MODULES) >= 4:
            del _MODULES[next(iter(_MODULES))]
        _MODULES[id(tree)] = (tree, lines, facts)
    return facts


def _looks(value: object, in_test: list[object], module: _Module, own: int) -> tuple[int, int, int]:
    """What a reader can see of a value: whether the test uses it elsewhere, how often its text occurs in
    the module (capped), its length class. ``own``: how many of the value's uses are the site's."""
    uses = _count(in_test, value) - own
    core = value.decode("latin-1") if isinstance(value, bytes) else str(value)
    seen = module.occurs(core) - own
    return (min(uses, 1), min(seen, 3), min(len(core), 12) // 4)


def _mismatch(a: tuple[int, int, int], b: tuple[int, int, int]) -> int:
    return 4 * abs(a[0] - b[0]) + 2 * abs(a[1] - b[1]) + abs(a[2] - b[2])


def _count(values: list[object], value: object) -> int:
    return sum(1 for v in values if type(v) is type(value) and v == value)


def _literals_all(root: ast.AST) -> list[object]:
    return [v for n in ast.walk(root) if (v := literal_value(n)) is not None]


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


def _far(value: object, taken: list[str], like: str) -> object:
    """A value distinct from ``value`` when small steps give none (a float so large that ``+ 0.5`` is
    itself, or within ``approx``'s tolerance): the copy must not be the original under another spelling."""
    if isinstance(value, float):
        for k in range(1, 1100):  # halvings of a finite float reach 0 within 1,100
            new = value / 2 ** k if abs(value) > 1 else value + k
            if _distinct(value, new) and _spell(new, like) not in taken:
                return new
    if isinstance(value, int) and not isinstance(value, bool):  # the near ones are all taken: the next free
        return next(new for k in range(1, len(taken) + 2) if _spell(new := value + k, like) not in taken)
    return _mutate(value, Random(len(taken)), [])


def _spell(value: object, like: str) -> str:
    """``value`` written as ``like`` writes its literal (same quotes)."""
    if isinstance(value, str):
        if is_raw(like) and raw_plain(value):
            return f"{like[0]}{like[1]}{value}{like[1]}"  # a raw string stays raw
        q = like[0] if like[:1] in ("'", '"') else "'"
        return f"{q}{escaped(value)}{q}" if q not in value and "\\" not in value else repr(value)
    if isinstance(value, bytes):
        q = like[1] if like[1:2] in ("'", '"') else "'"
        text = value.decode("latin-1")
        return f"b{q}{escaped(text)}{q}" if plain(value) and q not in text else repr(value)
    return repr(value)
