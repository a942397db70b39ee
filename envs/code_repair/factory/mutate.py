"""Procedural bugs: AST mutation sites of a source file, applied as minimal source-segment rewrites.

    sites = mutations("pkg/mod.py", source_bytes)   # every candidate, in a stable order
    buggy = sites[0].apply(source_bytes)             # the file with that one change

Operators (``Mutation.kind``): ``compare`` (``<`` <-> ``<=``, ``==`` <-> ``!=``, ``in`` <-> ``not in``, ``is``
<-> ``is not``), ``boolop`` (``and`` <-> ``or``), ``binop`` (``+`` <-> ``-``), ``off_by_one`` (a range()
bound or slice bound +-1), ``constant`` (an int +1, ``True`` <-> ``False``), ``negate`` (an if/while
condition inverted), ``drop`` (a statement removed), ``swap_args`` (the first two positional arguments
swapped), ``no_return`` (``return x`` -> ``x``). Each edit replaces one byte range of the file, so the fix is
the reverse of that edit and the diff is a few lines. Mutants that do not compile are not offered.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass

COMPARE_SWAPS = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "==",
                 "is not": "is", "not in": "in", "is": "is not", "in": "not in"}
_COMPARE_OPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
                ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in"}
_SIMPLE = (ast.Name, ast.Attribute, ast.Constant, ast.Call, ast.Subscript)
_DROPPABLE = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign)


@dataclass(frozen=True)
class Mutation:
    """One edit: replace bytes ``start:end`` of ``file`` with ``text``."""

    file: str
    kind: str
    start: int
    end: int
    text: str
    line: int

    @property
    def id(self) -> str:
        """A stable short id (file, place, edit)."""
        key = f"{self.file}\0{self.start}\0{self.end}\0{self.text}\0{self.kind}"
        return hashlib.sha256(key.encode()).hexdigest()[:10]

    def apply(self, source: bytes) -> bytes:
        return source[: self.start] + self.text.encode() + source[self.end :]

    def to_json(self) -> dict[str, object]:
        return {"file": self.file, "kind": self.kind, "start": self.start, "end": self.end,
                "text": self.text, "line": self.line}


class _Source:
    """Byte offsets of ast positions (col_offset counts UTF-8 bytes)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.starts = [0]
        for i, b in enumerate(data):
            if b == 0x0A:
                self.starts.append(i + 1)

    def off(self, line: int, col: int) -> int:
        return self.starts[line - 1] + col

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (self.off(node.lineno, node.col_offset),  # type: ignore[attr-defined]
                self.off(node.end_lineno, node.end_col_offset))  # type: ignore[attr-defined]

    def text(self, start: int, end: int) -> str:
        return self.data[start:end].decode("utf-8")


def mutations(file: str, data: bytes) -> list[Mutation]:
    """Every mutation of ``file`` that compiles, in source order (deduplicated)."""
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return []
    src = _Source(data)
    skip = _skipped_lines(tree, data)
    seen: set[tuple[int, int, str]] = set()
    out = []
    for node in ast.walk(tree):
        for m in _node_mutations(file, node, src):
            if m.line in skip or (m.start, m.end, m.text) in seen:
                continue
            seen.add((m.start, m.end, m.text))
            out.append(m)
    out.sort(key=lambda m: (m.start, m.end, m.kind, m.text))
    return [m for m in out if _compiles(m.apply(data))]


def _compiles(data: bytes) -> bool:
    try:
        compile(data, "<mutant>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def _skipped_lines(tree: ast.Module, data: bytes) -> set[int]:
    """Lines never mutated: docstrings, ``if TYPE_CHECKING:`` blocks, ``pragma: no cover`` lines."""
    lines: set[int] = set()
    for n, text in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        if "pragma: no cover" in text or "pragma: no mutate" in text:
            lines.add(n)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(
                body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            lines.update(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def _node_mutations(file: str, node: ast.AST, src: _Source) -> Iterator[Mutation]:
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        yield from _gap_swap(file, "compare", node.left, node.comparators[0], _COMPARE_OPS.get(
            type(node.ops[0]), ""), src)
    elif isinstance(node, ast.BoolOp) and len(node.values) == 2:
        op = "and" if isinstance(node.op, ast.And) else "or"
        yield from _gap_swap(file, "boolop", node.values[0], node.values[1], op, src)
    elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        if not any(isinstance(v, ast.Constant) and isinstance(v.value, str) for v in (node.left, node.right)):
            yield from _gap_swap(file, "binop", node.left, node.right, "+" if isinstance(node.op, ast.Add)
                                 else "-", src)
    elif isinstance(node, ast.Call):
        yield from _call_mutations(file, node, src)
    elif isinstance(node, ast.Slice):
        for bound in (node.lower, node.upper):
            if bound is not None:
                yield _shift(file, bound, src)
    elif isinstance(node, ast.Constant) and type(node.value) in (int, bool):
        yield _constant(file, node, src)
    elif isinstance(node, (ast.If, ast.While)):
        yield _negate(file, node.test, src)
    elif isinstance(node, ast.Return) and node.value is not None:
        start, end = src.span(node)
        vs, ve = src.span(node.value)
        yield Mutation(file, "no_return", start, end, src.text(vs, ve), node.lineno)
    body_lists = [getattr(node, f, None) for f in ("body", "orelse", "finalbody")]
    for body in body_lists:
        if isinstance(body, list) and len(body) > 1:
            for stmt in body:
                if isinstance(stmt, _DROPPABLE) and (m := _drop(file, stmt, src)) is not None:
                    yield m


def _gap_swap(file: str, kind: str, left: ast.AST, right: ast.AST, op: str,
              src: _Source) -> Iterator[Mutation]:
    """Swap the operator token found between two operands (formatting kept)."""
    new = {"and": "or", "or": "and", "+": "-", "-": "+"}.get(op) or COMPARE_SWAPS.get(op)
    if not new:
        return
    _, gap_start = src.span(left)
    gap_end, _ = src.span(right)
    gap = src.text(gap_start, gap_end)
    pattern = r"\s+".join(map(re.escape, op.split())) if op[0].isalpha() else re.escape(op)
    found = list(re.finditer(rf"(?<![<>=!])\b{pattern}\b(?![=<>])" if op[0].isalpha()
                             else rf"(?<![<>=!+\-*/]){pattern}(?![=<>])", gap))
    if len(found) != 1 or "#" in gap:
        return
    m = found[0]
    start = gap_start + len(gap[: m.start()].encode())
    end = gap_start + len(gap[: m.end()].encode())
    yield Mutation(file, kind, start, end, new, left.lineno)  # type: ignore[attr-defined]


def _call_mutations(file: str, node: ast.Call, src: _Source) -> Iterator[Mutation]:
    name = node.func.id if isinstance(node.func, ast.Name) else ""
    if name == "range" and node.args and not any(isinstance(a, ast.Starred) for a in node.args):
        bound = node.args[0] if len(node.args) == 1 else node.args[1]
        yield _shift(file, bound, src)
    args = node.args
    if len(args) >= 2 and not any(isinstance(a, ast.Starred) for a in args[:2]) and name not in (
            "isinstance", "issubclass", "getattr", "setattr", "hasattr", "super", "range"):
        a0, a1 = src.span(args[0]), src.span(args[1])
        t0, t1 = src.text(*a0), src.text(*a1)
        if t0 != t1 and "\n" not in t0 + t1:
            between = src.text(a0[1], a1[0])
            yield Mutation(file, "swap_args", a0[0], a1[1], t1 + between + t0, node.lineno)


def _shift(file: str, bound: ast.expr, src: _Source) -> Mutation:
    start, end = src.span(bound)
    if isinstance(bound, ast.Constant) and type(bound.value) is int:
        return Mutation(file, "off_by_one", start, end, str(bound.value + 1), bound.lineno)
    if isinstance(bound, ast.UnaryOp) and isinstance(bound.op, ast.USub) and isinstance(
            bound.operand, ast.Constant) and type(bound.operand.value) is int:
        return Mutation(file, "off_by_one", start, end, str(-bound.operand.value + 1), bound.lineno)
    text = src.text(start, end)
    text = text if isinstance(bound, _SIMPLE) else f"({text})"
    return Mutation(file, "off_by_one", start, end, f"{text} - 1", bound.lineno)


def _constant(file: str, node: ast.Constant, src: _Source) -> Mutation:
    start, end = src.span(node)
    text = src.text(start, end)
    if isinstance(node.value, bool):
        return Mutation(file, "constant", start, end, str(not node.value), node.lineno)
    new = str(node.value + 1) if text.isdigit() else f"({text} + 1)"
    return Mutation(file, "constant", start, end, new, node.lineno)


def _negate(file: str, test: ast.expr, src: _Source) -> Mutation:
    start, end = src.span(test)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        os_, oe = src.span(test.operand)
        inner = src.text(os_, oe)
        return Mutation(file, "negate", start, end, inner if isinstance(test.operand, _SIMPLE) else
                        f"({inner})", test.lineno)
    text = src.text(start, end)
    return Mutation(file, "negate", start, end, f"not {text}" if isinstance(test, _SIMPLE) else
                    f"not ({text})", test.lineno)


def _drop(file: str, stmt: ast.stmt, src: _Source) -> Mutation | None:
    """Remove whole lines of a statement that stands alone on them."""
    start, end = src.span(stmt)
    line_start = src.starts[stmt.lineno - 1]
    nxt = src.data.find(b"\n", end)
    line_end = len(src.data) if nxt < 0 else nxt + 1
    if src.data[line_start:start].strip() or src.data[end:line_end].strip(b" \t\r\n;") or b";" in src.data[
            end:line_end]:
        return None
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
        return None
    return Mutation(file, "drop", line_start, line_end, "", stmt.lineno)
