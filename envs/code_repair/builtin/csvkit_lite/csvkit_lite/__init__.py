"""CSV reading with per-column type inference, column selection, filtering and group-by sums."""

from .infer import infer_column, parse_value
from .table import Table, read_csv

__all__ = ["Table", "infer_column", "parse_value", "read_csv"]
