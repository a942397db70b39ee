"""A small exact Matrix class (entries are fractions.Fraction)."""
from .core import Matrix, MatrixError, SingularMatrixError

__all__ = ["Matrix", "MatrixError", "SingularMatrixError"]
