"""AST mutations: each operator's edit, minimal diffs, compiling mutants, a stable seeded order."""

from __future__ import annotations

from pathlib import Path

import pytest

from envfarm.envs.code_repair.factory.mine import order
from envfarm.envs.code_repair.factory.mutate import Mutation, distinct, mutations

SOURCE = b'''\
def f(xs, n, flag):
    """Docstring: x < y is never mutated."""
    total = 0
    for i in range(n):
        total += xs[i]
    if total < 10 and flag:
        return total + 1
    while n >= 0:
        n -= 1
    print(xs[1:n], max(n, 2))
    return True
'''


def edits(kind: str) -> list[str]:
    out = []
    for m in mutations("pkg/mod.py", SOURCE):
        if m.kind == kind:
            line = m.apply(SOURCE).decode().splitlines()[m.line - 1] if m.text else "<dropped>"
            out.append(line.strip())
    return out


@pytest.mark.parametrize(("kind", "expected"), [
    ("compare", ["if total <= 10 and flag:", "while n > 0:"]),
    ("boolop", ["if total < 10 or flag:"]),
    ("binop", ["return total - 1"]),
    ("off_by_one", ["for i in range(n - 1):", "print(xs[2:n], max(n, 2))", "print(xs[1:n - 1], max(n, 2))"]),
    ("negate", ["if not (total < 10 and flag):", "while not (n >= 0):"]),
    ("swap_args", ["print(max(n, 2), xs[1:n])", "print(xs[1:n], max(2, n))"]),
    ("no_return", ["total + 1", "True"]),
])
def test_each_operator_rewrites_one_segment(kind: str, expected: list[str]) -> None:
    assert sorted(edits(kind)) == sorted(expected)


def test_constants_drops_and_docstrings() -> None:
    consts = edits("constant")
    assert "total = 1" in consts and "return False" in consts and "if total < 11 and flag:" in consts
    dropped = [m for m in mutations("pkg/mod.py", SOURCE) if m.kind == "drop"]
    assert dropped and all(m.text == "" for m in dropped)
    assert not any(m.line == 2 for m in mutations("pkg/mod.py", SOURCE))  # the docstring line


def test_every_mutant_compiles_differs_and_reverses() -> None:
    found = mutations("pkg/mod.py", SOURCE)
    assert len({m.id for m in found}) == len(found) > 20
    for m in found:
        buggy = m.apply(SOURCE)
        assert buggy != SOURCE
        compile(buggy, "mutant", "exec")
        assert buggy[: m.start] + SOURCE[m.start:m.end] + buggy[m.start + len(m.text.encode()):] == SOURCE


def test_equivalent_and_uncompilable_mutants_are_not_offered() -> None:
    src = b"def f(a, b):\n    return a + b * 2\n"
    start = src.index(b"a + b")
    end = start + len(b"a + b * 2")
    edits = ["(a + b * 2)", "a + b * (1 + 1)", "a +", "a - b * 2", "a - (b * 2)", "a  -  b*2", "b - a * 2"]
    found = distinct([Mutation("m.py", "x", start, end, text, 2) for text in edits], {"m.py": src})
    # the same code as the original (parentheses, a folded constant), no code, the same code as an earlier one
    assert [m.text for m in found] == ["a - b * 2", "b - a * 2"]


def test_unicode_offsets_are_bytes() -> None:
    src = "def g(s):\n    return 'é' == s or s < 'ü'\n".encode()
    swaps = [m.apply(src).decode() for m in mutations("m.py", src) if m.kind in ("compare", "boolop")]
    assert "def g(s):\n    return 'é' != s or s < 'ü'\n" in swaps
    assert "def g(s):\n    return 'é' == s and s < 'ü'\n" in swaps


def test_unparsable_source_has_no_mutations() -> None:
    assert mutations("bad.py", b"def (:\n") == []


def test_order_is_seeded_stable_and_mixes_kinds() -> None:
    found = mutations("pkg/mod.py", SOURCE)
    a, b = order(found, 7, "pkg"), order(list(reversed(found)), 7, "pkg")
    assert [m.id for m in a] != [m.id for m in found]
    assert order(found, 7, "pkg") == a
    assert order(found, 8, "pkg") != a
    assert len({m.kind for m in a[:6]}) == 6
    assert sorted(m.id for m in b) == sorted(m.id for m in a)


def test_mutation_id_is_content_addressed() -> None:
    m = Mutation("a.py", "compare", 3, 4, "<=", 1)
    assert m.id == Mutation("a.py", "compare", 3, 4, "<=", 9).id
    assert m.id != Mutation("b.py", "compare", 3, 4, "<=", 1).id


MORE = b'''\
def g(xs, n: int | None = None, k=2, strict=False):
    if n is None:
        return []
    if xs and n > 0:
        total = n * k
        total += max(n, 1)
        name = str(xs).strip()
        normalize(xs)
        return total // 2, name, "%s" % n
    return xs
'''


def more(kind: str) -> list[str]:
    out = []
    for m in mutations("pkg/g.py", MORE):
        if m.kind == kind:
            buggy = m.apply(MORE).decode().splitlines()
            out.append(buggy[m.line - 1].strip() if m.text else f"<dropped line {m.line}>")
    return out


@pytest.mark.parametrize(("kind", "expected"), [
    ("operator", ["total = n / k", "total -= max(n, 1)", "total += min(n, 1)",
                  'return total / 2, name, "%s" % n']),
    ("default", ["def g(xs, n: int | None = None, k=3, strict=False):",
                 "def g(xs, n: int | None = None, k=2, strict=True):"]),
    ("drop_condition", ["<dropped line 2>", "if n > 0:", "if xs:"]),
    ("removed_call", ["name = xs.strip()", "name = str(xs)", "<dropped line 8>"]),
])
def test_more_bug_classes(kind: str, expected: list[str]) -> None:
    assert sorted(more(kind)) == sorted(expected)


def test_no_operator_bugs_in_annotations_or_string_formatting() -> None:
    found = mutations("pkg/g.py", MORE)
    assert not any(m.line == 1 and m.kind == "operator" for m in found)  # int | None
    assert all("%" in m.apply(MORE).decode() for m in found)  # "%s" % n is never touched


def test_mutants_with_the_same_syntax_tree_are_offered_once() -> None:
    import ast

    src = b"def h(a):\n    if not (a):\n        return 1\n    return 0\n"
    trees = [m.apply(src) for m in mutations("h.py", src)]
    dumps = [ast.dump(ast.parse(t)) for t in trees]
    assert len(dumps) == len(set(dumps)) and ast.dump(ast.parse(src)) not in dumps


def test_combine_makes_several_edits_one_span() -> None:
    from envfarm.envs.code_repair.factory.mutate import combine

    found = mutations("pkg/mod.py", SOURCE)
    a = next(m for m in found if m.kind == "compare" and m.line == 6)
    b = next(m for m in found if m.kind == "no_return" and m.line == 11)
    both = combine([b, a], SOURCE)
    assert both.kind == "compare+no_return" and both.line == 6
    assert a.start < b.start and both.apply(SOURCE) == a.apply(b.apply(SOURCE))  # b first: a's offsets hold
    with pytest.raises(ValueError, match="non-overlapping"):
        combine([a, a], SOURCE)


def test_difficulty_signal() -> None:
    from envfarm.envs.code_repair.factory.difficulty import difficulty, enclosing_scope

    assert enclosing_scope(SOURCE, 7) == "f" and enclosing_scope(b"x = 1\n", 1) == ""
    m = next(m for m in mutations("pkg/mod.py", SOURCE) if m.kind == "compare" and m.line == 6)
    files = {"pkg/mod.py": SOURCE, "tests/test_mod.py": b"from pkg.mod import f\n",
             "tests/test_o.py": b"import pkg.mod\n", "tests/test_far.py": b"import pkg\n"}
    near = difficulty(files, m, ["tests/test_mod.py::test_a"] * 3, ["tests/test_mod.py"])
    assert near == {"fail_to_pass": 3, "distance": 0, "scope": "f", "edit_lines": 1, "mutations": 1,
                    "score": 1}
    assert difficulty(files, m, ["t"] * 3, ["tests/test_o.py"])["distance"] == 1
    far = difficulty(files, m, ["t"], ["tests/test_far.py"])
    assert far["distance"] == 2 and far["score"] == 4  # far from the tests, one failing test


def test_k_edit_tasks_and_equivalent_tasks_once(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from envfarm.envs.code_repair.factory.mine import MineConfig, _Miner
    from envfarm.envs.code_repair.factory.state import Outcome

    singles = [m for m in mutations("pkg/mod.py", SOURCE) if m.kind in ("compare", "binop", "no_return")]
    miner = object.__new__(_Miner)
    miner.prepared = SimpleNamespace(project=SimpleNamespace(files={"pkg/mod.py": SOURCE}))
    miner.candidates = singles
    statements = ["same", "same", *(f"s{i}" for i in range(len(singles)))]
    miner.outcomes = {m.id: Outcome(m.id, "kept", problem_statement=s)
                      for m, s in zip(singles, statements, strict=False)}
    miner.config = MineConfig(packages=("x==1",), out=tmp_path / "t.jsonl")
    kept = [m.id for m in miner.kept()]
    assert kept == [m.id for m in (singles[0], *singles[2:])]  # the first two read the same: one task
    miner.config = MineConfig(packages=("x==1",), out=tmp_path / "t.jsonl", mutations=2)
    combos = miner.combos()
    assert combos and all(c.kind.count("+") == 1 for c in combos) and miner.kept() == []  # combos not tried
    for c in combos:
        lines = [m.line for m in singles if c.start <= m.start and m.end <= c.end]
        assert len(set(lines)) >= 2
    miner.outcomes[combos[0].id] = Outcome(combos[0].id, "kept", problem_statement="combo")
    assert miner.kept() == [combos[0]]


async def test_a_mutant_that_kills_its_sandbox_is_recorded_crashed(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from contextlib import asynccontextmanager
    from types import SimpleNamespace

    from envfarm.envs.code_repair.factory import mine as mine_mod
    from envfarm.envs.code_repair.factory.state import Outcome, WorkFolder
    from envfarm.errors import SandboxCrashed

    singles = mutations("pkg/mod.py", SOURCE)[:4]
    poison = singles[1]
    miner = object.__new__(mine_mod._Miner)
    project = SimpleNamespace(files={"pkg/mod.py": SOURCE}, key="pypi__x", spec=SimpleNamespace(name="x"),
                              env=SimpleNamespace(test_cmd="pytest"))
    miner.prepared = SimpleNamespace(project=project, image="img", env={}, stamp="s")
    miner.candidates, miner.outcomes, miner.ran, miner.crashes = singles, {}, 0, {}
    miner.config = mine_mod.MineConfig(packages=("x==1",), out=tmp_path / "t.jsonl", jobs=1)
    miner.work, miner.emit, miner.backend = WorkFolder(tmp_path / "t.jsonl"), lambda event: None, None
    opened: list[int] = []

    @asynccontextmanager
    async def fake_open(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        opened.append(1)
        yield object()

    async def fake_try(session: object, m: mine_mod.Mutation) -> Outcome:
        if m.id == poison.id:
            raise SandboxCrashed("the agent did not answer")
        return Outcome(m.id, "survived")

    monkeypatch.setattr(mine_mod.TestSession, "open", fake_open)
    miner._try = fake_try  # type: ignore[method-assign]
    await miner._run(singles, lambda: False)
    assert miner.outcomes[poison.id].verdict == "crashed" and len(opened) == 3  # 2 lost, then the rest
    assert [miner.outcomes[m.id].verdict for m in singles if m != poison] == ["survived"] * 3
    assert len(WorkFolder(tmp_path / "t.jsonl").read_outcomes("pypi__x", "s")) == 4  # resumable


HOOKED = (b"import atexit\nimport os\n\n\ndef init(f):\n    atexit.register(f)\n    return f\n\n\n"
          b"def stop(code):\n    os._exit(code + 1)\n\n\ndef add(a, b):\n    return a + b\n")


def test_a_mutant_whose_fix_reads_as_a_forgery_is_not_tried() -> None:
    """The fix of a mutant that drops ``atexit.register(f)`` (or edits an ``os._exit`` call) restores what the
    harness's static screen flags: under ``--strict`` its task's gold could never resolve, so the miner
    records it ``suspect-fix`` without a run; a fix of ordinary code is clean."""
    from envfarm.envs.code_repair.factory.mine import suspect_fix
    from envfarm.envs.code_repair.factory.mutate import sites

    found = {(m.kind, m.line): {s.rule for s in suspect_fix(m, HOOKED)} for m in sites("pkg/mod.py", HOOKED)}
    assert found[("removed_call", 6)] == {"atexit"}
    assert [rules for (_, line), rules in found.items() if line == 11] == [{"hard-exit"}] * 2
    assert [rules for (_, line), rules in found.items() if line == 15] == [set(), set()]
