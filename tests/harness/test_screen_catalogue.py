"""bench/screen.py --catalogue-mutants: a mutant's gold patch rendered as the miner's row, screened in the
context a mined row gets (no network: a project in memory)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from envfarm.envs.code_repair.factory.mine import order
from envfarm.envs.code_repair.factory.mutate import Mutation, distinct, sites
from envfarm.envs.code_repair.factory.repo import EnvRecipe, Project, make_project
from envfarm.envs.code_repair.factory.sdist import PackageSpec

ROOT = Path(__file__).resolve().parents[2]
SOURCE = b"import atexit\n\n\ndef flush():\n    pass\n\n\natexit.register(flush)\nLIMIT = 3\n"
TESTS = ("toy/tests/test_toy.py",)


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_screen", ROOT / "bench" / "screen.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def project() -> Project:
    files = {"toy/__init__.py": SOURCE, TESTS[0]: b"def test_limit():\n    assert True\n"}
    env = EnvRecipe((), "python -m pytest", ".", 60.0)
    return make_project(PackageSpec("toy", "1.0"), "toy-1.0.tar.gz", "0" * 64, files, env)


def _mutant(bench: ModuleType, project: Project, kind: str, line: int) -> Mutation:
    every = sites("toy/__init__.py", project.files["toy/__init__.py"])
    ordered: list[Mutation]
    ordered, offered = bench.mined_candidates(every, project.files, "toy", 0, 0)
    assert len(ordered) == len(every)
    return next(m for m in ordered if m.kind == kind and m.line == line and m.id in offered)


def test_dropped_atexit_call_gives_a_suspect_gold_patch(bench: ModuleType, project: Project) -> None:
    dropped = _mutant(bench, project, "removed_call", 8)  # the mutant leaves atexit.register(flush) out
    (hit,) = bench.screen_mutants(project, [dropped], TESTS, frozenset({dropped.id}))
    assert (hit.file, hit.line, hit.kind, hit.offered) == ("toy/__init__.py", 8, "removed_call", True)
    assert hit.instance_id == f"pypi__toy-1.0-{dropped.id}"
    assert [(r["rule"], r["path"], r["line"]) for r in hit.reasons] == [("atexit", "toy/__init__.py", 1)]
    assert "\n+atexit.register(flush)\n" in hit.patch and hit.patch.startswith("diff --git a/toy/__init__.py")


def test_other_mutants_are_not_suspect(bench: ModuleType, project: Project) -> None:
    constant = _mutant(bench, project, "constant", 9)  # LIMIT = 4
    assert bench.screen_mutants(project, [constant], TESTS) == []


def test_the_miners_order_up_to_its_limit_with_the_sites_distinct_skips(
    bench: ModuleType, project: Project
) -> None:
    every = sites("toy/__init__.py", project.files["toy/__init__.py"])
    ordered = order(every, 0, "toy")
    first = list(distinct(ordered, project.files))[:2]
    reach, offered = bench.mined_candidates(every, project.files, "toy", 0, 2)
    assert reach == ordered[: ordered.index(first[1]) + 1] and offered == {m.id for m in first}


def test_context_of_a_mined_row_and_a_patch_independent_of_hidden_files(
    bench: ModuleType, project: Project
) -> None:
    m = _mutant(bench, project, "constant", 9)
    ctx = bench.mined_context(project, m, TESTS)
    assert (ctx.test_files, ctx.test_command) == (TESTS, "")
    (with_hidden,) = bench.mined_rows(project, [m], TESTS)
    (plain,) = bench.mined_rows(project, [m])
    assert with_hidden["patch"] == plain["patch"] and "-LIMIT = 4\n+LIMIT = 3\n" in plain["patch"]


def test_json_keeps_what_this_run_did_not_measure(bench: ModuleType) -> None:
    before = {
        "date": "2026-12-01",
        "gold": {
            "sets": {"mined:tasks.jsonl": {"rows": 220, "suspect": 0}, "lite": {"rows": 1, "suspect": 0}}
        },
        "catalogue_mutants": {"mutants": 9},
    }
    now = {"date": "2026-12-07", "gold": {"sets": {"lite": {"rows": 2, "suspect": 0}}}}
    out = bench.merged(before, now)
    assert out["catalogue_mutants"] == {"mutants": 9} and out["date"] == "2026-12-07"
    assert out["gold"]["sets"] == {"lite": {"rows": 2, "suspect": 0}}
    assert out["gold"]["earlier"] == {"mined:tasks.jsonl": {"rows": 220, "suspect": 0, "date": "2026-12-01"}}
