"""Procedural bugs: AST mutation sites of a source file, applied as minimal source-segment rewrites.

    found = mutations("pkg/mod.py", source_bytes)   # every candidate, in a stable order
    buggy = found[0].apply(source_bytes)             # the file with that one change
    checked = distinct(shuffled_sites, {"pkg/mod.py": source_bytes})  # lazily: compile checks as consumed

Operators (``Mutation.kind``): ``compare`` (``<`` <-> ``<=``, ``==`` <-> ``!=``, ``in`` <-> ``not in``, ``is``
<-> ``is not``), ``boolop`` (``and`` <-> ``or``), ``binop`` (``+`` <-> ``-``), ``operator`` (a wrong
operator: ``*`` <-> ``/``, ``//`` <-> ``/``, ``%`` -> ``//``, ``&`` <-> ``|``, ``<<`` <-> ``>>``, ``+=`` <->
``-=``, ``min`` <-> ``max``), ``off_by_one`` (a range() bound or slice bound +-1), ``constant`` (an int +1,
``True`` <-> ``False``), ``default`` (a wrong parameter default), ``negate`` (an if/while condition
inverted), ``drop_condition`` (one operand of an ``and``/``or`` test left out, or a guard clause
``if c: return``/``raise``/``continue`` removed), ``drop`` (a statement removed), ``removed_call`` (a call
statement removed, ``f(x)`` -> ``x``, ``s.strip()`` -> ``s``), ``swap_args`` (the first two positional
arguments swapped), ``no_return`` (``return x`` -> ``x``). Each edit replaces one byte range of the file, so
the fix is the reverse of that edit and the diff is a few lines. Mutants that do not compile, and mutants
whose module compiles to the same code as another's or the original's (``not (x)`` vs ``not x``, ``1 + 1``
vs ``2``: equivalent mutants), are not offered. ``combine`` joins several edits of one file into one
(``--mutations K``: harder tasks).
"""

from __future__ import annotations

import ast
import hashlib
import re
import types
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise

from envfarm.pyast import compile_source, parse

COMPARE_SWAPS = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "==",
                 "is not": "is", "not in": "in", "is": "is not", "in": "not in"}
_COMPARE_OPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
                ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in"}
_SIMPLE = (ast.Name, ast.Attribute, ast.Constant, ast.Call, ast.Subscript)
_DROPPABLE = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign)
OPERATOR_SWAPS = {"*": "/", "/": "*", "//": "/", "%": "//", "&": "|", "|": "&", "<<": ">>", ">>": "<<"}
_BINOPS = {ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.BitAnd: "&", ast.BitOr: "|",
           ast.LShift: "<<", ast.RShift: ">>"}
_AUG = {ast.Add: ("+=", "-="), ast.Sub: ("-=", "+="), ast.Mult: ("*=", "/="), ast.BitOr: ("|=", "&=")}
_GUARD_BODY = (ast.Return, ast.Raise, ast.Continue, ast.Break)
_NOT_UNWRAPPED = {"isinstance", "issubclass", "getattr", "setattr", "hasattr", "super", "range", "len",
                  "print", "type", "id", "iter", "next", "open", "repr", "callable", "vars", "dir", "object",
                  "Exception", "ValueError", "TypeError", "KeyError", "RuntimeError", "NotImplementedError",
                  "cast"}
"""Calls never unwrapped (``len(x)`` -> ``x`` only crashes; an exception class is not a transformation)."""
_NORMALIZERS = {"strip", "lstrip", "rstrip", "lower", "upper", "casefold", "copy", "title"}


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
    """Every mutation of ``file`` that compiles to new code, in source order."""
    return list(distinct(sites(file, data), {file: data}))


def sites(file: str, data: bytes) -> list[Mutation]:
    """Every mutation site of ``file``, in source order, before the compile and same-code checks of
    :func:`distinct` (cheap: one parse of the file; a miner orders these and checks only what it tries)."""
    try:
        tree = parse(data)
    except (SyntaxError, ValueError):
        return []
    src = _Source(data)
    skip = _skipped_lines(tree, data)
    annotations = _annotation_nodes(tree)
    statement_calls = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}  # f(x) -> x: a no-op
    seen: set[tuple[int, int, str]] = set()
    out = []
    for node in ast.walk(tree):
        if id(node) in annotations:
            continue
        for m in _node_mutations(file, node, src):
            if m.line in skip or (m.start, m.end, m.text) in seen or (
                    m.kind == "removed_call" and m.text and id(node) in statement_calls):
                continue
            seen.add((m.start, m.end, m.text))
            out.append(m)
    out.sort(key=lambda m: (m.start, m.end, m.kind, m.text))
    return out


def distinct(candidates: Iterable[Mutation], sources: Mapping[str, bytes]) -> Iterator[Mutation]:
    """The candidates that compile and whose module compiles to code neither its original file nor an
    earlier candidate of the same file does, lazily in the order given (each check compiles the whole file;
    the code compared without line and column positions, so spacing and parentheses do not count)."""
    seen_by_file: dict[str, set[str | None]] = {}
    for m in candidates:
        data = sources[m.file]
        seen = seen_by_file.setdefault(m.file, {_code_key(data), None})  # None: does not compile
        key = _code_key(m.apply(data))
        if key not in seen:
            seen.add(key)
            yield m


def combine(edits: Sequence[Mutation], source: bytes) -> Mutation:
    """One mutation of ``source`` making every edit of ``edits`` (one file, non-overlapping spans)."""
    ordered = sorted(edits, key=lambda m: m.start)
    if len({m.file for m in ordered}) != 1 or any(a.end > b.start for a, b in pairwise(ordered)):
        raise ValueError("combine takes non-overlapping edits of one file")
    start, end = ordered[0].start, max(m.end for m in ordered)
    segment = source[start:end]
    for m in reversed(ordered):
        segment = segment[: m.start - start] + m.text.encode() + segment[m.end - start:]
    return Mutation(ordered[0].file, "+".join(m.kind for m in ordered), start, end, segment.decode("utf-8"),
                    ordered[0].line)


def _code_key(data: bytes) -> str | None:
    """A digest of the module's compiled code, positions left out; None when it does not compile."""
    try:
        code = compile_source(data)
    except (SyntaxError, ValueError):
        return None
    return hashlib.sha1(repr(_code_parts(code)).encode(), usedforsecurity=False).hexdigest()


def _code_parts(code: types.CodeType) -> tuple[object, ...]:
    """What a code object does, without where: its bytecode, names, flags, exception table and constants
    (nested code objects the same way); not its line table, first line or file name."""
    return (code.co_code, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars,
            code.co_flags, code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount,
            code.co_qualname, code.co_exceptiontable, tuple(_const_key(k) for k in code.co_consts))


def _const_key(value: object) -> object:
    """A constant as compared: typed (``1`` is not ``1.0`` or ``True``), sets in a fixed order."""
    if isinstance(value, types.CodeType):
        return _code_parts(value)
    if isinstance(value, tuple):
        return ("tuple", tuple(_const_key(v) for v in value))
    if isinstance(value, frozenset):
        return ("frozenset", tuple(sorted(repr(_const_key(v)) for v in value)))
    return (type(value).__name__, repr(value))


def _annotation_nodes(tree: ast.Module) -> set[int]:
    """Nodes inside type annotations (``int | None`` is no place for an operator bug)."""
    roots: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            roots.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            roots.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
    return {id(n) for root in roots for n in ast.walk(root)}


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
    elif isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left = node.left
        text_format = isinstance(left, ast.JoinedStr) or (isinstance(left, ast.Constant) and
                                                           isinstance(left.value, str))  # "%s" % x
        if not text_format:
            yield from _gap_swap(file, "operator", node.left, node.right, _BINOPS[type(node.op)], src)
    elif isinstance(node, ast.AugAssign) and type(node.op) in _AUG:
        yield from _gap_swap(file, "operator", node.target, node.value, _AUG[type(node.op)][0], src)
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
        if isinstance(node.test, ast.BoolOp):
            yield from _drop_operands(file, node.test, src)
    elif isinstance(node, ast.Return) and node.value is not None:
        start, end = src.span(node)
        vs, ve = src.span(node.value)
        yield Mutation(file, "no_return", start, end, src.text(vs, ve), node.lineno)
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        for default in (*node.args.defaults, *node.args.kw_defaults):
            if isinstance(default, ast.Constant) and type(default.value) in (int, bool):
                yield replace(_constant(file, default, src), kind="default")
    body_lists = [getattr(node, f, None) for f in ("body", "orelse", "finalbody")]
    for body in body_lists:
        if isinstance(body, list) and len(body) > 1:
            for stmt in body:
                if _droppable(stmt) and (m := _drop(file, stmt, src)) is not None:
                    yield m


def _droppable(stmt: ast.stmt) -> bool:
    """A simple statement, or a guard clause (``if c: return``/``raise``/``continue``/``break``)."""
    return isinstance(stmt, _DROPPABLE) or (isinstance(stmt, ast.If) and not stmt.orelse
                                            and len(stmt.body) == 1 and isinstance(stmt.body[0], _GUARD_BODY))


def _drop_operands(file: str, test: ast.BoolOp, src: _Source) -> Iterator[Mutation]:
    """``if a and b:`` -> ``if a:`` / ``if b:`` (a condition left out)."""
    start, end = src.span(test)
    texts = [src.text(*src.span(v)) for v in test.values]
    op = " and " if isinstance(test.op, ast.And) else " or "
    for i in range(len(texts)):
        rest = texts[:i] + texts[i + 1:]
        if len(rest) == 1 or all("\n" not in t for t in rest):
            yield Mutation(file, "drop_condition", start, end, op.join(rest), test.lineno)


def _gap_swap(file: str, kind: str, left: ast.AST, right: ast.AST, op: str,
              src: _Source) -> Iterator[Mutation]:
    """Swap the operator token found between two operands (formatting kept)."""
    new = {"and": "or", "or": "and", "+": "-", "-": "+"}.get(op) if kind != "operator" else \
        OPERATOR_SWAPS.get(op) or dict(_AUG.values()).get(op)
    new = new or COMPARE_SWAPS.get(op)
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
    if name in ("min", "max") and node.args:
        fs, fe = src.span(node.func)
        yield Mutation(file, "operator", fs, fe, "max" if name == "min" else "min", node.lineno)
    args = node.args
    if len(args) >= 2 and not any(isinstance(a, ast.Starred) for a in args[:2]) and name not in (
            "isinstance", "issubclass", "getattr", "setattr", "hasattr", "super", "range"):
        a0, a1 = src.span(args[0]), src.span(args[1])
        t0, t1 = src.text(*a0), src.text(*a1)
        if t0 != t1 and "\n" not in t0 + t1:
            between = src.text(a0[1], a1[0])
            yield Mutation(file, "swap_args", a0[0], a1[1], t1 + between + t0, node.lineno)
    if (m := _unwrap(file, node, name, src)) is not None:
        yield m


def _unwrap(file: str, node: ast.Call, name: str, src: _Source) -> Mutation | None:
    """A call left out: ``f(x)`` -> ``x`` (one plain argument), ``s.strip()`` -> ``s`` (a normalizer)."""
    start, end = src.span(node)
    inner: ast.expr | None = None
    if len(node.args) == 1 and not node.keywords and not isinstance(node.args[0], ast.Starred) and (
            (name and name not in _NOT_UNWRAPPED) or isinstance(node.func, ast.Attribute)):
        inner = node.args[0]
    elif not node.args and not node.keywords and isinstance(node.func, ast.Attribute) and \
            node.func.attr in _NORMALIZERS:
        inner = node.func.value
    if inner is None:
        return None
    text = src.text(*src.span(inner))
    return Mutation(file, "removed_call", start, end, text if isinstance(inner, _SIMPLE) else f"({text})",
                    node.lineno)


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
    new = str(int(text) + 1) if text.isdigit() else f"({text} + 1)"
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
    call = isinstance(stmt, ast.Expr) and isinstance(stmt.value, (ast.Call, ast.Await))
    kind = "removed_call" if call else "drop_condition" if isinstance(stmt, ast.If) else "drop"
    return Mutation(file, kind, line_start, line_end, "", stmt.lineno)
