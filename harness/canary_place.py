"""Names and places of cloned canaries (``canary_clone.py``): a name in the module's style, next to the tests
test_patch adds.

The copies of one test and the test itself form a *group* a reader can find (same code up to a value). Within
a group nothing may single the original out: the names are edits along a random tree (uniform over labelled
trees, the original at a uniform node, so it is no likelier than a copy to be the name nearest to all the
others), and the original's rank in the group's order is uniform."""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from random import Random

from .canary_types import Known, Source, Style

NAME_LIMIT = 70
"""Longest name a copy may take (or its original's length, if longer): sympy's runner prints ``name ok`` on
an 80-column line."""

# ------------------------------------------------------------------------------------------ naming


def _tokens(name: str) -> tuple[str, list[str], bool]:
    """(prefix, words, snake) of a test name: ``test_foo_bar`` or ``testFooBar``."""
    m = re.match(r"(test_*)(.*)$", name, re.I)
    prefix, rest = (m.group(1), m.group(2)) if m else ("test_", name)
    if "_" in rest or rest.islower() or not rest:
        return prefix, [t for t in rest.split("_") if t], True
    return prefix, re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+", rest), False


def _join(prefix: str, words: list[str], snake: bool) -> str:
    if snake:
        return prefix + "_".join(words)  # words keep their case (test_setup_setUpClass)
    return prefix + "".join(w[:1].upper() + w[1:] for w in words)


def vocabulary(tree: ast.Module) -> list[str]:
    words = []
    for n in ast.walk(tree):
        if isinstance(n, ast.FunctionDef) and n.name.startswith("test"):
            words += [w.lower() for w in _tokens(n.name)[1]]
    return [w for w in dict.fromkeys(words) if w.isalpha() and 2 <= len(w) <= 14]


def _body_words(node: ast.FunctionDef) -> list[str]:
    """Words of the identifiers the test's body uses (names, attributes, arguments, keywords)."""
    words = []
    for n in ast.walk(node):
        for field, value in ast.iter_fields(n):
            own = n is node and field == "name"
            if isinstance(value, str) and not isinstance(n, ast.Constant) and not own:
                words += re.findall(r"[a-z]+", value.lower())
    return [w for w in dict.fromkeys(words) if 2 <= len(w) <= 14]


def name_for(source: str, vocab: list[str], node: ast.FunctionDef, rng: Random, taken: set[str],
             limit: int = 10_000) -> str:
    """A fresh name in ``source``'s style: its words with one dropped, added or replaced by a word of the
    module's test names or of the test's body. A word added comes from the body as often as the source's own
    words do, and a word dropped is one of the body's as often (the share of a name's words found in its
    body would otherwise tell the copy from the original)."""
    prefix, words, snake = _tokens(source)
    ordered = _body_words(node)  # drawn from in this order: a set's would vary with the hash seed
    body = set(ordered)
    share = sum(w.lower() in body for w in words) / len(words) if words else 0.5
    inside = [w for w in ordered if w not in words]
    outside = [w for w in vocab if w not in words and w not in body]
    inside, outside = inside or outside or ["check"], outside or inside or ["check"]

    def word() -> str:
        fresh = [w for w in (inside if rng.random() < share else outside) if w not in new and len(w) > 2]
        return rng.choice(fresh or inside)

    for attempt in range(400):
        new = list(words)
        for _ in range(1 + (rng.random() < 0.3) + attempt // 50):
            op = rng.choice(("add", "drop", "replace") if len(new) > 1 else ("add", "replace"))
            if op == "add":
                new.insert(rng.randrange(len(new) + 1), word())
                continue
            if not new:
                new.append(word())
                continue
            want = rng.random() < share
            spots = [i for i, w in enumerate(new) if (w.lower() in body) == want] or list(range(len(new)))
            i = rng.choice(spots)
            if op == "drop":
                new.pop(i)
            else:
                new[i] = word()
        name = _join(prefix, new, snake)
        if name.isidentifier() and name not in taken and new and (len(name) <= limit or attempt >= 300):
            taken.add(name)
            return name
    raise RuntimeError(f"no fresh name for a copy of {source}")


def group_names(source: str, k: int, vocab: list[str], node: ast.FunctionDef, tree: ast.Module, rng: Random,
                taken: set[str]) -> list[str]:
    """``k`` fresh names for copies of ``source``: each an edit (:func:`name_for`) of its parent's name in a
    uniformly random labelled tree over the group, whose node 0 is the original."""
    # no longer than the module's names: sympy's runner wraps a long name's result onto a line of its own,
    # where swebench's parser no longer sees it
    longest = max((len(n.name) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
                   and n.name.startswith("test")), default=0)
    limit = max(len(source), min(longest, NAME_LIMIT))
    parent = random_tree(k + 1, rng)
    names = [source] + [""] * k
    for child in _bfs(parent):
        names[child] = name_for(names[parent[child]], vocab, node, rng, taken, limit)
    return names[1:]


def random_tree(n: int, rng: Random) -> list[int]:
    """Parent of each node of a uniformly random labelled tree on ``n`` nodes rooted at node 0 (Prüfer
    decoding); ``parent[0]`` is -1."""
    edges: list[tuple[int, int]] = []
    if n == 2:
        edges = [(0, 1)]
    elif n > 2:
        seq = [rng.randrange(n) for _ in range(n - 2)]
        degree = [1] * n
        for x in seq:
            degree[x] += 1
        for x in seq:
            leaf = min(i for i in range(n) if degree[i] == 1)
            edges.append((leaf, x))
            degree[leaf] -= 1
            degree[x] -= 1
        u, v = (i for i in range(n) if degree[i] == 1)
        edges.append((u, v))
    near: dict[int, list[int]] = {i: [] for i in range(n)}
    for a, b in edges:
        near[a].append(b)
        near[b].append(a)
    parent, stack = [-1] * n, [0]
    seen = {0}
    while stack:
        x = stack.pop()
        for y in near[x]:
            if y not in seen:
                seen.add(y)
                parent[y] = x
                stack.append(y)
    return parent


def _bfs(parent: list[int]) -> list[int]:
    """Nodes other than the root, each after its parent."""
    order, frontier = [], [0]
    while frontier:
        frontier = [c for p in frontier for c in range(len(parent)) if parent[c] == p]
        order += frontier
    return order


# ------------------------------------------------------------------------------------------ placing


def group_spots(s: Source, k: int, sources: Sequence[Source], tree: ast.Module, known: Known | None,
                module: str, style: Style, rng: Random) -> list[tuple[int, bool]]:
    """Places for ``k`` copies of ``s``: the original's rank among the group is uniform (so many copies go
    before it, the rest after), each copy before or after the original or another test test_patch adds in
    the same scope, on its side of the original. For sympy never after the module's last test (its runner
    prints a file's result on that test's line, where swebench's parser no longer sees it)."""
    added = [x.node for x in sources
             if x.cls is s.cls and (known is None or (module, x.node.name) in known.added)]
    anchors = list({id(n): n for n in [s.node, *added]}.values())
    body = s.cls.body if s.cls else tree.body
    tests = [n for n in body
             if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name.startswith(("test", "Test"))]
    last = tests[-1] if style == "sympy" and s.cls is None and tests else None
    before = rng.randint(0, k) if s.node is not last else k
    out = []
    for i in rng.sample(range(k), k):
        early = i < before
        side = [a for a in anchors if (a.lineno <= s.node.lineno if early else a.lineno >= s.node.lineno)]
        anchor = rng.choice(side or [s.node])
        after = not early if anchor is s.node else rng.random() < 0.5
        if anchor is last:
            after = False
        first = min([anchor.lineno, *(d.lineno for d in anchor.decorator_list)])
        out.append(((anchor.end_lineno or anchor.lineno) if after else first - 1, s.cls is None))
    return out



def apply_inserts(lines: list[str], inserts: Sequence[tuple[str, tuple[int, bool]]]) -> str:
    out = list(lines)
    if out and not out[-1].endswith("\n"):
        out[-1] += "\n"
    for text, (at, top) in sorted(inserts, key=lambda x: x[1][0], reverse=True):
        gap = "\n\n" if top else "\n"
        before = at > 0 and out[at - 1].strip() != ""
        # no second gap before a block inserted at the same place (it opens with its own)
        after = at < len(out) and out[at].strip() and not out[at].startswith("\n")
        block = (gap if before else "") + text + (gap if after else "")
        out.insert(at, block)
    return "".join(out)
