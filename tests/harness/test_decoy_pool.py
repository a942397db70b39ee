"""The differential check's pool of decoys gold was seen to fail (harness/decoy_pool.py): probes are planted
at any literal and never judged, a real pytest run says which fail, those join the pool, and a test with no
expected literal then draws its decoys from the pool, which fail under pytest while the honest copy passes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from random import Random

import pytest

from envfarm.errors import HarnessError
from envfarm.harness import _swebench, differential
from envfarm.harness.decoy_pool import PROBE, VALIDATED, DecoyPoolError, PoolSite, gather, load, write

MODULE = textwrap.dedent('''\
    from shapes import shout

    SEEN = {}


    def test_shout():
        SEEN["word"] = "ho"
        word = "hi"
        assert "HI!!" in shout("hi", 2)
        assert shout(word, 2).startswith("HI")
    ''')
PACKAGE = "def shout(word, n):\n    return word.upper() + '!' * n + ' ...'\n"
WANTED = [(None, "test_shout")]


def _statuses(tmp_path: Path, text: str) -> dict[str, str]:
    (tmp_path / "shapes.py").write_text(PACKAGE)
    (tmp_path / "tests").mkdir(exist_ok=True)
    (tmp_path / "tests" / "test_shapes.py").write_text(text)
    cmd = [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "tests/test_shapes.py"]
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}
    res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    parse = _swebench.load().log_parsers.PARSER_REGISTRY["parse_log_pytest"]
    return dict(parse(res.stdout + res.stderr, None))


def _renamed(tmp_path: Path, planting: differential.Planting) -> dict[str, str]:
    """Outcomes of the planted module's tests, honest copies under their tests' names."""
    status = _statuses(tmp_path, planting.text)
    return {differential.rename_back(k, planting.twins): v for k, v in status.items()}


def test_probes_are_tried_never_judged_and_the_pool_keeps_those_that_failed(tmp_path: Path) -> None:
    planting = differential.plant("tests/test_shapes.py", MODULE, WANTED, rng=Random(0), probe=True)
    probes = [t for t in planting.twins if t.how == PROBE]
    judged = [t for t in planting.twins if t.how != PROBE]
    assert judged and {t.how for t in judged} <= {"swapped", "negated", "appended"}, "no expected literal"
    lines = MODULE.splitlines()
    for t in probes:  # each edit names the literal it replaces, counted from the def line
        p = PoolSite.parse(t.edit)
        assert (p.cls, p.func) == (None, "test_shout") and p.values[0] != p.old
        assert lines[5 + p.row].encode()[p.start:p.end].decode() == p.old
    rows = {PoolSite.parse(t.edit).row for t in probes}
    assert 1 not in rows, "not a literal a statement stores elsewhere (state the copies may share)"
    assert 2 in rows, "a literal bound to a local name"
    assert len({PoolSite.parse(t.edit).start for t in probes if PoolSite.parse(t.edit).row > 2}) > 1
    again = differential.plant("tests/test_shapes.py", MODULE, WANTED, rng=Random(1), probe=True)
    assert {t.edit for t in again.twins if t.how == PROBE} == {t.edit for t in probes}, "same probes"
    renamed = _renamed(tmp_path, planting)
    assert renamed["tests/test_shapes.py::test_shout"] == "PASSED"
    assert differential.verdict(planting.twins, renamed)[0], "a probe that passes proves nothing"
    seen = differential.probed(planting.twins, renamed)
    assert {e for _, e, _ in seen} == {t.edit for t in probes}
    failed = {e for _, e, f in seen if f}
    assert failed and len(failed) < len(seen), "some edits fail under the fix, some do not"
    pool = gather([seen])["tests/test_shapes.py"]
    tried = [PoolSite.parse(e) for e in failed]
    assert {(s.old, v) for s in pool for v in s.values} == {(p.old, p.values[0]) for p in tried}


def test_a_test_without_an_expected_literal_draws_decoys_from_the_pool_that_fail(tmp_path: Path) -> None:
    planting = differential.plant("tests/test_shapes.py", MODULE, WANTED, rng=Random(0), probe=True)
    renamed = _renamed(tmp_path, planting)
    pool = gather([differential.probed(planting.twins, renamed)])["tests/test_shapes.py"]
    for seed in range(4):
        graded = differential.plant("tests/test_shapes.py", MODULE, WANTED, rng=Random(seed), pool=pool)
        assert {t.how for t in graded.twins} == {VALIDATED}
        assert not any(t.edit for t in graded.twins)
        status = _renamed(tmp_path, graded)
        assert status["tests/test_shapes.py::test_shout"] == "PASSED"
        assert {status[f"tests/test_shapes.py::{t.decoy}"] for t in graded.twins} == {"FAILED"}
        assert differential.verdict(graded.twins, status)[0]


def test_a_pool_site_that_no_longer_matches_the_test_is_left_out() -> None:
    stale = (PoolSite(None, "test_shout", 3, 27, 31, '"yo"', ('"ho"',)),
             PoolSite("Other", "test_shout", 3, 27, 31, '"hi"', ('"ho"',)),
             PoolSite(None, "test_shout", 40, 0, 4, '"hi"', ('"ho"',)))
    graded = differential.plant("tests/test_shapes.py", MODULE, WANTED, rng=Random(0), pool=stale)
    assert graded.twins and VALIDATED not in {t.how for t in graded.twins}
    fresh = differential.plant("tests/test_shapes.py", MODULE, WANTED, rng=Random(0),
                               pool=(PoolSite(None, "test_shout", 3, 27, 31, '"hi"', ('"ho"',)),))
    assert [t.how for t in fresh.twins] == [VALIDATED]
    assert 'shout("ho", 2)' in fresh.text and 'shout("hi", 2)' in fresh.text


def test_gather_keeps_edits_that_failed_in_every_run() -> None:
    a = PoolSite(None, "t", 1, 0, 1, "1", ("2",)).key()
    b = PoolSite(None, "t", 1, 0, 1, "1", ("3",)).key()
    c = PoolSite("K", "t", 2, 4, 7, "'x'", ("'y'",)).key()
    pool = gather([[("m.py", a, True), ("m.py", b, True), ("m.py", c, True)],
                   [("m.py", a, True), ("m.py", b, False)]])
    assert set(pool) == {"m.py"}
    assert set(pool["m.py"]) == {PoolSite(None, "t", 1, 0, 1, "1", ("2",)),
                                 PoolSite("K", "t", 2, 4, 7, "'x'", ("'y'",))}


def test_pool_file_round_trips_and_a_bad_one_is_a_clear_error(tmp_path: Path) -> None:
    pools = {"row-1": {"m.py": (PoolSite(None, "t", 1, 0, 1, "1", ("2", "5")),)}, "row-2": {}}
    write(tmp_path / "decoys.json", pools)
    assert load(tmp_path / "decoys.json") == {"row-1": pools["row-1"]}
    with pytest.raises(DecoyPoolError, match=r"missing\.json.*harness validate") as missing:
        load(tmp_path / "missing.json")
    assert isinstance(missing.value, HarnessError)
    (tmp_path / "bad.json").write_text('{"row-1": {"m.py": [{"cls": null}]}}')
    with pytest.raises(DecoyPoolError, match=r"bad\.json is not a decoys\.json"):
        load(tmp_path / "bad.json")


def test_probes_reach_expected_exception_blocks_past_a_nested_function_but_not_other_calls() -> None:
    text = textwrap.dedent('''\
        import pytest
        from shapes import shout


        def test_rejects():
            def helper(n):
                return n + 1

            print("start")
            shout.cache_clear(7)
            with pytest.raises(ValueError, match="empty"):
                shout("", 3)
        ''')
    planting = differential.plant("tests/test_shapes.py", text, [(None, "test_rejects")], rng=Random(0),
                                  probe=True)
    rows = {PoolSite.parse(t.edit).row for t in planting.twins if t.how == PROBE}
    assert rows and rows <= {6, 7}, "literals of the raises block, none of the calls before it"
