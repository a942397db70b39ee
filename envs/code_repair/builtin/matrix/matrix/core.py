from __future__ import annotations

from fractions import Fraction
from numbers import Rational
from typing import Iterable, Sequence


class MatrixError(ValueError):
    pass


class SingularMatrixError(MatrixError):
    pass


def _frac(x) -> Fraction:
    if isinstance(x, (Fraction, int)):
        return Fraction(x)
    if isinstance(x, str):
        return Fraction(x)
    if isinstance(x, float):
        return Fraction(x).limit_denominator(10**12)
    if isinstance(x, Rational):
        return Fraction(x.numerator, x.denominator)
    raise TypeError(f"cannot use {type(x).__name__} as a matrix entry")


class Matrix:
    __slots__ = ("_rows", "rows", "cols")

    def __init__(self, rows: Iterable[Sequence]):
        data = [[_frac(x) for x in row] for row in rows]
        if not data or not data[0]:
            raise MatrixError("a matrix needs at least one row and one column")
        width = len(data[0])
        if any(len(r) != width for r in data):
            raise MatrixError("rows have different lengths")
        self._rows = data
        self.rows = len(data)
        self.cols = width

    # construction -----------------------------------------------------------------------------------------
    @classmethod
    def identity(cls, n: int) -> "Matrix":
        return cls([[1 if i == j else 0 for j in range(n)] for i in range(n)])

    @classmethod
    def zeros(cls, rows: int, cols: int) -> "Matrix":
        return cls([[0] * cols for _ in range(rows)])

    # basics -----------------------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.cols)

    @property
    def is_square(self) -> bool:
        return self.rows == self.cols

    def __getitem__(self, idx: tuple[int, int]) -> Fraction:
        i, j = idx
        return self._rows[i][j]

    def row(self, i: int) -> list[Fraction]:
        return list(self._rows[i])

    def col(self, j: int) -> list[Fraction]:
        return [r[j] for r in self._rows]

    def tolist(self) -> list[list[Fraction]]:
        return [list(r) for r in self._rows]

    def __eq__(self, other) -> bool:
        if not isinstance(other, Matrix):
            return NotImplemented
        return self._rows == other._rows

    def __hash__(self):
        return hash(tuple(map(tuple, self._rows)))

    def __repr__(self) -> str:
        body = ", ".join("[" + ", ".join(str(x) for x in r) + "]" for r in self._rows)
        return f"Matrix([{body}])"

    # arithmetic -------------------------------------------------------------------------------------------
    def _check_same_shape(self, other: "Matrix", op: str) -> None:
        if self.shape != other.shape:
            raise MatrixError(f"cannot {op} {self.shape} and {other.shape} matrices")

    def __add__(self, other: "Matrix") -> "Matrix":
        if not isinstance(other, Matrix):
            return NotImplemented
        self._check_same_shape(other, "add")
        return Matrix([[a + b for a, b in zip(r, s)] for r, s in zip(self._rows, other._rows)])

    def __sub__(self, other: "Matrix") -> "Matrix":
        if not isinstance(other, Matrix):
            return NotImplemented
        self._check_same_shape(other, "subtract")
        return Matrix([[a - b for a, b in zip(r, s)] for r, s in zip(self._rows, other._rows)])

    def __neg__(self) -> "Matrix":
        return self.scale(-1)

    def scale(self, k) -> "Matrix":
        k = _frac(k)
        return Matrix([[k * x for x in r] for r in self._rows])

    def __mul__(self, other):
        if isinstance(other, Matrix):
            return self @ other
        try:
            return self.scale(other)
        except TypeError:
            return NotImplemented

    def __rmul__(self, other):
        try:
            return self.scale(other)
        except TypeError:
            return NotImplemented

    def __matmul__(self, other: "Matrix") -> "Matrix":
        if not isinstance(other, Matrix):
            return NotImplemented
        if self.cols != other.rows:
            raise MatrixError(f"cannot multiply {self.shape} by {other.shape}")
        out = []
        for i in range(self.rows):
            row = []
            for j in range(other.cols):
                total = Fraction(0)
                for k in range(self.cols):
                    total += self._rows[i][k] * other._rows[k][j]
                row.append(total)
            out.append(row)
        return Matrix(out)

    def __pow__(self, n: int) -> "Matrix":
        if not self.is_square:
            raise MatrixError("only square matrices have powers")
        if n < 0:
            return self.inverse() ** (-n)
        result, base = Matrix.identity(self.rows), self
        while n:
            if n & 1:
                result = result @ base
            base = base @ base
            n >>= 1
        return result

    def transpose(self) -> "Matrix":
        return Matrix([list(col) for col in zip(*self._rows)])

    @property
    def T(self) -> "Matrix":
        return self.transpose()

    def trace(self) -> Fraction:
        if not self.is_square:
            raise MatrixError("trace needs a square matrix")
        return sum((self._rows[i][i] for i in range(self.rows)), Fraction(0))

    # elimination ------------------------------------------------------------------------------------------
    def determinant(self) -> Fraction:
        if not self.is_square:
            raise MatrixError("determinant needs a square matrix")
        a = self.tolist()
        n = self.rows
        det = Fraction(1)
        for c in range(n):
            pivot = next((r for r in range(c, n) if a[r][c] != 0), None)
            if pivot is None:
                return Fraction(0)
            if pivot != c:
                a[c], a[pivot] = a[pivot], a[c]
                det = -det
            det *= a[c][c]
            for r in range(c + 1, n):
                f = a[r][c] / a[c][c]
                if f:
                    for k in range(c, n):
                        a[r][k] -= f * a[c][k]
        return det

    det = determinant

    def inverse(self) -> "Matrix":
        if not self.is_square:
            raise MatrixError("only square matrices can be inverted")
        n = self.rows
        a = [row + [Fraction(int(i == j)) for j in range(n)] for i, row in enumerate(self.tolist())]
        for c in range(n):
            pivot = next((r for r in range(c, n) if a[r][c] != 0), None)
            if pivot is None:
                raise SingularMatrixError("matrix is singular")
            a[c], a[pivot] = a[pivot], a[c]
            p = a[c][c]
            a[c] = [x / p for x in a[c]]
            for r in range(n):
                if r != c and a[r][c] != 0:
                    f = a[r][c]
                    a[r] = [x - f * y for x, y in zip(a[r], a[c])]
        return Matrix([row[n:] for row in a])

    def rank(self) -> int:
        a = self.tolist()
        rank, row = 0, 0
        for c in range(self.cols):
            pivot = next((r for r in range(row, self.rows) if a[r][c] != 0), None)
            if pivot is None:
                continue
            a[row], a[pivot] = a[pivot], a[row]
            for r in range(row + 1, self.rows):
                f = a[r][c] / a[row][c]
                a[r] = [x - f * y for x, y in zip(a[r], a[row])]
            row += 1
            rank += 1
            if row == self.rows:
                break
        return rank

    def solve(self, b: Sequence) -> list[Fraction]:
        """Solve self @ x = b for a vector x."""
        if len(b) != self.rows:
            raise MatrixError("right-hand side has the wrong length")
        x = self.inverse() @ Matrix([[v] for v in b])
        return x.col(0)
