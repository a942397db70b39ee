"""``ast.parse`` and ``compile`` of Python source, safe to call from several threads at once.

CPython 3.11 keeps the AST converter's recursion depth per interpreter, not per thread: two threads parsing
at once can fail with ``SystemError: AST constructor recursion depth mismatch``. The factory parses on the
event loop and in worker threads (candidate checks, rows), so every parse goes through one lock here.
"""

from __future__ import annotations

import ast
import threading
import warnings

_LOCK = threading.Lock()


def parse(source: bytes | str) -> ast.Module:
    """``ast.parse(source)`` under the lock (raises SyntaxError/ValueError as ast.parse does)."""
    with _LOCK:
        return ast.parse(source)


def parse_and_compile(source: bytes) -> ast.Module:
    """The module's tree, checked to compile (SyntaxWarnings silenced); SyntaxError/ValueError if not."""
    with _LOCK, warnings.catch_warnings():  # "'int' object is not subscriptable" and such: it compiles
        warnings.simplefilter("ignore", SyntaxWarning)
        tree = ast.parse(source)
        compile(tree, "<mutant>", "exec", dont_inherit=True)
    return tree
