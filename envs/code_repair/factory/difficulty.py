"""A difficulty signal per mined task: how many tests fail, how far the edit is from the tests, how big it is.

    signal = difficulty(project.files, mutation, fail_to_pass, hidden_test_files)
    signal["score"]      # 1 (easy) .. 5 (hard)

``distance``: 0 when a failing test file names the function (or class) the edit is in, 1 when it only names
the edited module, 2 when it names neither (the bug is reached through other code). ``edit_lines``: lines
the fix changes. ``mutations``: edits in the task (``--mutations K``). The score adds one for each step of
distance, one when at most two tests fail (little to go on), and one per extra edit; at most 5.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from typing import Any

from envfarm.pyast import parse

from .mutate import Mutation

MAX_SCORE = 5


def difficulty(files: Mapping[str, bytes], mutation: Mutation, fail_to_pass: Sequence[str],
               hidden: Sequence[str]) -> dict[str, Any]:
    """The signal of one task (a JSON object; see the module docstring)."""
    source = files[mutation.file]
    scope = enclosing_scope(source, mutation.line)
    tests = b"\n".join(files.get(h, b"") for h in hidden)
    parts = mutation.file.removesuffix(".py").split("/")
    module = parts[-2] if parts[-1] == "__init__" and len(parts) > 1 else parts[-1]
    if scope and _names(tests, scope):
        distance = 0
    elif _names(tests, module):
        distance = 1
    else:
        distance = 2
    before = source[mutation.start:mutation.end].count(b"\n") + 1
    after = mutation.text.count("\n") + 1
    edits = mutation.kind.count("+") + 1
    failing = len(fail_to_pass)
    score = 1 + min(distance, 2) + (failing <= 2) + (edits - 1)
    return {"fail_to_pass": failing, "distance": distance, "scope": scope, "edit_lines": max(before, after),
            "mutations": edits, "score": min(score, MAX_SCORE)}


def enclosing_scope(source: bytes, line: int) -> str:
    """The innermost function or class around ``line`` (``""`` at module level)."""
    try:
        tree = parse(source)
    except (SyntaxError, ValueError):
        return ""
    best, size = "", None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            end = node.end_lineno or node.lineno
            if node.lineno <= line <= end and (size is None or end - node.lineno < size):
                best, size = node.name, end - node.lineno
    return best


def _names(text: bytes, name: str) -> bool:
    return bool(name) and re.search(rb"\b" + re.escape(name.encode()) + rb"\b", text) is not None
