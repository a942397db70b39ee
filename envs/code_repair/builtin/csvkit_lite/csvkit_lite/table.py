"""An in-memory table read from CSV text."""

from __future__ import annotations

import csv
import io
from typing import Any, Callable, Iterable, TextIO

from .infer import infer_column, parse_value


class Table:
    def __init__(self, columns: list[str], rows: list[tuple], types: dict[str, type] | None = None):
        if len(set(columns)) != len(columns):
            raise ValueError(f"duplicate column names: {columns}")
        self.columns = list(columns)
        self.rows = [tuple(r) for r in rows]
        self.types = dict(types or {c: object for c in columns})

    def __len__(self) -> int:
        return len(self.rows)

    def _index(self, column: str) -> int:
        try:
            return self.columns.index(column)
        except ValueError:
            raise KeyError(f"no column {column!r}; have {self.columns}") from None

    def column(self, name: str) -> list[Any]:
        i = self._index(name)
        return [row[i] for row in self.rows]

    def dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row)) for row in self.rows]

    def select(self, *names: str) -> "Table":
        idx = [self._index(n) for n in names]
        return Table(list(names), [tuple(row[i] for i in idx) for row in self.rows], {n: self.types[n] for n in names})

    def where(self, predicate: Callable[[dict[str, Any]], bool]) -> "Table":
        keep = [row for row, d in zip(self.rows, self.dicts()) if predicate(d)]
        return Table(self.columns, keep, self.types)

    def sort_by(self, name: str, reverse: bool = False) -> "Table":
        i = self._index(name)
        present = [r for r in self.rows if r[i] is not None]
        missing = [r for r in self.rows if r[i] is None]
        return Table(self.columns, sorted(present, key=lambda r: r[i], reverse=reverse) + missing, self.types)

    def group_sum(self, key: str, value: str) -> dict[Any, Any]:
        """Sum ``value`` per distinct ``key`` (keys in first-seen order); empty values are skipped."""
        ki, vi = self._index(key), self._index(value)
        totals: dict[Any, Any] = {}
        for row in self.rows:
            k, v = row[ki], row[vi]
            totals.setdefault(k, 0)
            if v is None:
                continue
            totals[k] += v
        return totals

    def to_csv(self) -> str:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(self.columns)
        for row in self.rows:
            writer.writerow(["" if v is None else _format(v) for v in row])
        return out.getvalue()


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def read_csv(source: str | TextIO, delimiter: str = ",", infer: bool = True) -> Table:
    """Read CSV text (or a file object) whose first row is the header."""
    text = source if isinstance(source, str) else source.read()
    records = [r for r in csv.reader(io.StringIO(text), delimiter=delimiter) if any(c.strip() for c in r)]
    if not records:
        raise ValueError("empty CSV")
    header = [h.strip() for h in records[0]]
    width = len(header)
    body = []
    for lineno, rec in enumerate(records[1:], start=2):
        if len(rec) > width:
            raise ValueError(f"row {lineno} has {len(rec)} fields, header has {width}")
        body.append(rec + [""] * (width - len(rec)))
    if not infer:
        return Table(header, [tuple(c if c.strip() else None for c in r) for r in body], {h: str for h in header})
    types = {h: infer_column(r[i] for r in body) for i, h in enumerate(header)}
    rows = [tuple(parse_value(r[i], types[h]) for i, h in enumerate(header)) for r in body]
    return Table(header, rows, types)
