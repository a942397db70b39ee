"""envfarm.pyast: every parse that may run in a worker thread takes one lock."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from envfarm import pyast

DIRECT = re.compile(r"(?<![\w.])ast\.(parse|literal_eval)\(")


@pytest.mark.parametrize("package", ["envfarm.envs.code_repair.factory", "envfarm.harness"])
def test_code_that_parses_in_worker_threads_parses_only_through_the_lock(package: str) -> None:
    """CPython 3.11's AST converter is not thread-safe (``SystemError: AST constructor recursion depth
    mismatch``, seen mining two projects at once and grading forgeries side by side): the task factory and
    the harness parse only through ``envfarm.pyast``."""
    import importlib

    folder = Path(importlib.import_module(package).__file__ or "").parent
    direct = sorted(p.name for p in folder.glob("*.py") if DIRECT.search(p.read_text(encoding="utf-8")))
    assert direct == []


def test_the_locked_calls_answer_as_ast_does() -> None:
    assert [type(n).__name__ for n in pyast.parse("x = 1\ndef f(): pass\n").body] == ["Assign", "FunctionDef"]
    assert pyast.literal_eval("[1, 'a', (2.5, None)]") == [1, "a", (2.5, None)]
    with pytest.raises(SyntaxError):
        pyast.parse("def (")
    with pytest.raises(ValueError):
        pyast.literal_eval("f(1)")


def test_threads_parsing_at_once_all_get_their_trees() -> None:
    source = "def f(x):\n" + "".join(f"    y{i} = [[x, {i}], {{'k': (x, {i})}}]\n" for i in range(200))
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(20):
                assert len(pyast.parse(source).body[0].body) == 200
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
