"""The differential check (harness/differential.py): FAIL_TO_PASS tests run beside perturbed twins that must
fail. Planted twins behave as declared under real pytest; a framework rewritten in memory to flip failures
is caught by this check alone (canaries off) on a built-in CodeRepair task and on a SWE-bench row; gold
patches still resolve, with every twin checked, on every built-in task and on mirrored SWE-bench rows."""

from __future__ import annotations

import asyncio
import base64
import difflib
import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from random import Random
from typing import Any

import pytest
from newtests import BOUND_TESTS, ENUM_TESTS, RAW_TESTS, known_new

from envfarm.harness import (
    HarnessConfig,
    InstanceReport,
    Outcome,
    Policy,
    Prediction,
    ResolutionStatus,
    _swebench,
    canary,
    differential,
    evaluate,
    grade,
    load_instances,
)
from envfarm.harness.differential import Target, Twin
from envfarm.harness.grading import ForgeryCheck
from envfarm.harness.images import PRISTINE, ImageBuilder
from envfarm.harness.run import run_attempt, sandbox_limits
from envfarm.harness.specs import SpecCatalog
from envfarm.sandbox import Backend, get_backend
from envfarm.testing.exploit_payloads import PYTEST_PLUGIN, hook_code
from envfarm.testing.toyrepo import LITE

BUILTIN_ROW = "envfarm__roman-four-hundreds"
FLASK_ROWS = ("pallets__flask-4045", "pallets__flask-4992", "pallets__flask-5063")
FLIP_ALL = "pytest-report"
"""exploit_payloads.PATCHES key: TestReport.from_item_and_call rewritten to turn every failure into a pass."""
PACKAGE = {
    "shapes/__init__.py": "def area(w, h):\n    return w * h\n\n\ndef label(n):\n    return 'n%d' % n\n",
}
MODULE = textwrap.dedent('''\
    """Tests of shapes."""
    import pytest

    from shapes import area, label


    def test_area():
        got = area(2, 3)
        assert got == 6


    def test_label():
        assert label(4) == "n4"


    @pytest.mark.parametrize("w", [1, 2])
    def test_area_param(w):
        assert area(w, 1) == w


    class TestShapes:
        def test_truthy(self):
            assert area(1, 1)

        def test_helper_only(self):
            area(1, 1)


    def test_other():
        assert area(0, 1) == 0
    ''')
WANTED = [(None, "test_area"), (None, "test_label"), (None, "test_area_param"), ("TestShapes", "test_truthy"),
          ("TestShapes", "test_helper_only")]


def _run_pytest(tmp_path: Path, text: str, *extra: str) -> str:
    for path, body in PACKAGE.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(body)
    (tmp_path / "tests").mkdir(exist_ok=True)
    (tmp_path / "tests" / "test_shapes.py").write_text(text)
    cmd = [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", *extra, "tests/test_shapes.py"]
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}
    res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    return res.stdout + res.stderr


def _status(log: str) -> dict[str, str]:
    parse = _swebench.load().log_parsers.PARSER_REGISTRY["parse_log_pytest"]
    return dict(parse(log, None))


def test_expected_names_point_at_functions_classes_and_files() -> None:
    assert differential.target("tests/test_x.py::TestK::test_f[a::b-1]") == Target("test_f", "TestK",
                                                                                   "tests/test_x.py")
    assert differential.target("tests/test_x.py::test_g") == Target("test_g", None, "tests/test_x.py")
    assert differential.target("test_h (admin_views.tests.AdminTests)") == Target("test_h", "AdminTests")
    assert differential.target("test_sqrt") == Target("test_sqrt")
    names = ["tests/test_a.py::test_one", "tests/test_b.py::test_two", "test_three"]
    assert differential.targets_in("tests/test_a.py", names) == [(None, "test_one"), (None, "test_three")]


def test_new_passing_tests_are_twinned_after_every_failing_one() -> None:
    """PASS_TO_PASS tests test_patch adds come after the FAIL_TO_PASS tests (the limit cuts them first);
    PASS_TO_PASS tests the repository has are never targets."""
    patch = ("diff --git a/tests/test_shapes.py b/tests/test_shapes.py\n--- a/tests/test_shapes.py\n"
             "+++ b/tests/test_shapes.py\n@@ -1,1 +1,9 @@\n+def test_label():\n+def test_other():\n")
    passing = ["tests/test_shapes.py::test_label", "tests/test_shapes.py::test_other",
               "tests/test_shapes.py::TestShapes::test_truthy"]
    wanted, then = differential.targets("tests/test_shapes.py", ["tests/test_shapes.py::test_area"], passing,
                                        patch)
    assert (wanted, then) == ([(None, "test_area")], [(None, "test_label"), (None, "test_other")])
    for seed in range(6):
        one = differential.plant("tests/test_shapes.py", MODULE, wanted, rng=Random(seed), limit=1, then=then)
        assert {t.test for t in one.twins} == {"test_area"}, "the failing test first"
        every = differential.plant("tests/test_shapes.py", MODULE, wanted, rng=Random(seed), then=then)
        assert {t.test for t in every.twins} == {"test_area", "test_label", "test_other"}


@pytest.mark.parametrize("seed", range(4))
def test_a_test_edited_in_place_gets_decoys_where_its_old_version_is_no_nearer_the_honest_copy(
        seed: int) -> None:
    """Both lines are test_patch's (the second for a comment), so the last literal comes first; but the
    repository's version has its value, and the copy nearest to the old version would be the honest one."""
    old = 'from shapes import area, label\n\n\ndef test_it():\n    assert label(4) == "n4"\n' \
          '    assert area(2, 3) == 6\n'
    new = old.replace('"n4"', '"n4!"').replace("== 6\n", "== 6  # and the area\n")
    added = new.splitlines()[-2:]
    blind = differential.plant("t.py", new, [(None, "test_it")], added, Random(seed))
    fair = differential.plant("t.py", new, [(None, "test_it")], added, Random(seed), before=old)
    assert {t.how for t in blind.twins + fair.twins} == {"literal"}
    copies = 1 + len(blind.twins)
    assert (blind.text.count("== 6  #"), blind.text.count('"n4!"')) == (1, copies), "blind: the 6"
    copies = 1 + len(fair.twins)
    assert (fair.text.count("== 6  #"), fair.text.count('"n4!"')) == (copies, 1), "the value the edit changed"


@pytest.mark.parametrize("seed", range(3))
def test_a_test_whose_every_literal_is_unfair_gets_a_decoy_of_another_form_that_fails(
        tmp_path: Path, seed: int) -> None:
    """test_patch changed an input in place, not the expected value: a decoy value there would leave the
    honest copy the nearest to the old version, so the decoy takes another form, and it fails (the
    fallback once wrote the old literal back: an unchanged copy that passed under gold)."""
    old = 'from shapes import label\n\n\ndef test_label():\n    assert label(3) == "n4"\n'
    new = old.replace("label(3)", "label(4)")
    planting = differential.plant("tests/test_shapes.py", new, [(None, "test_label")], new.splitlines()[-1:],
                                  Random(seed), before=old)
    assert planting.twins and {t.how for t in planting.twins} <= {"swapped", "negated", "appended"}
    status = _status(differential.rename_back(_run_pytest(tmp_path, planting.text), planting.twins))
    assert status["tests/test_shapes.py::test_label"] == "PASSED"
    assert {status[f"tests/test_shapes.py::{t.decoy}"] for t in planting.twins} == {"FAILED"}, planting.text
    assert differential.verdict(planting.twins, status)[0]


@pytest.mark.parametrize("seed", range(3))
def test_where_no_literal_is_fair_a_decoy_takes_the_tests_other_forms_not_an_appended_one(
        tmp_path: Path, seed: int) -> None:
    """A test with an unfair expected literal and a bare ``assert got``: its decoys take that assertion in a
    form that fails (``got is False``, ``got is None``), as a test without literals would, rather than an
    appended assertion a reader tells from the honest copy at once."""
    old = 'from shapes import label\n\n\ndef test_label():\n    got = label(3)\n    assert got\n' \
          '    assert got == "n4"\n'
    new = old.replace("label(3)", "label(4)")
    planting = differential.plant("tests/test_shapes.py", new, [(None, "test_label")], [new.splitlines()[4]],
                                  Random(seed), before=old)
    assert planting.twins and {t.how for t in planting.twins} == {"swapped"}, planting.text
    assert "isinstance" not in planting.text and "assert not got" not in planting.text, planting.text
    status = _status(differential.rename_back(_run_pytest(tmp_path, planting.text), planting.twins))
    assert status["tests/test_shapes.py::test_label"] == "PASSED"
    assert {status[f"tests/test_shapes.py::{t.decoy}"] for t in planting.twins} == {"FAILED"}, planting.text


@pytest.mark.parametrize("seed", range(4))
def test_honest_copies_pass_and_decoys_fail_under_pytest(tmp_path: Path, seed: int) -> None:
    planting = differential.plant("tests/test_shapes.py", MODULE, WANTED, rng=Random(seed))
    assert len({t.test for t in planting.twins}) == len(WANTED), "every wanted test is twinned"
    assert {t.how for t in planting.twins} >= {"literal", "appended"}
    for name in ("test_area", "test_label"):
        values = [t for t in planting.twins if t.test == name]
        assert len(values) == differential.DECOYS, f"{name}: one decoy per value"
        assert len({t.honest for t in values}) == 1 and len({t.decoy for t in values}) == len(values)
    log = differential.rename_back(_run_pytest(tmp_path, planting.text), planting.twins)
    status = _status(log)
    for name in ("test_area", "test_label", "test_area_param[1]", "test_area_param[2]",
                 "TestShapes::test_truthy", "TestShapes::test_helper_only", "test_other"):
        assert status[f"tests/test_shapes.py::{name}"] == "PASSED", (name, log)
    runs = sum(2 if t.test == "test_area_param" else 1 for t in planting.twins)  # two parameters
    names = {t.decoy for t in planting.twins}
    decoys = {k: v for k, v in status.items() if k.split("::")[-1].split("[")[0] in names}
    assert len(decoys) == runs and set(decoys.values()) == {"FAILED"}, log
    passed, detail = differential.verdict(planting.twins, status)
    assert passed, detail
    assert detail.startswith(f"{runs} passing test(s) checked"), detail


def test_honest_copies_are_renamed_back_in_a_coloured_log(tmp_path: Path) -> None:
    """``pytest --color yes`` (some projects' tox.ini sets it) wraps each test name in escapes."""
    planting = differential.plant("tests/test_shapes.py", MODULE, WANTED, rng=Random(5))
    raw = _run_pytest(tmp_path, planting.text, "--color", "yes")
    assert "\x1b[" in raw, "pytest coloured its output"
    status = _status(differential.rename_back(raw, planting.twins))
    assert status["tests/test_shapes.py::test_label"] == "PASSED", raw
    names = {k.split("::")[-1].split("[")[0] for k in status}
    assert not names & {t.honest for t in planting.twins}, "no honest copy keeps its own name"
    assert differential.verdict(planting.twins, status)[0]


def test_a_failure_flipping_plugin_fails_the_verdict(tmp_path: Path) -> None:
    (tmp_path / "speedups.py").write_text(PYTEST_PLUGIN)
    planting = differential.plant("tests/test_shapes.py", MODULE, WANTED, rng=Random(7))
    log = differential.rename_back(_run_pytest(tmp_path, planting.text, "-p", "speedups"), planting.twins)
    status = _status(log)
    assert set(status.values()) == {"PASSED"}, "the plugin flips every failure"
    passed, detail = differential.verdict(planting.twins, status)
    assert not passed and "must fail, reported PASSED" in detail, detail


def test_copies_of_a_test_share_its_decoy_site_and_values() -> None:
    """Canaries cloned from a test (an unchanged copy, a copy with another value) must not single out the
    honest copy: every unchanged copy is twinned with the same decoy values, at the literal where the other
    copy differs, and no decoy repeats that copy's value."""
    body = "    got = area(2, 3)\n    assert got == {v}\n    assert label(1) == 'n1'\n"
    text = "".join(f"def {name}():\n{body.format(v=v)}\n\n" for name, v in
                   (("test_area", 6), ("test_area_copy", 6), ("test_area_wrong", 5)))
    planting = differential.plant("tests/t.py", text, [(None, "test_area")], rng=Random(3))
    groups: dict[str, set[str]] = {}
    for t in planting.twins:
        groups.setdefault(t.test, set()).add(t.decoy)
    assert set(groups) == {"test_area", "test_area_copy"}, planting.text
    values = {}
    for test, names in groups.items():
        bodies = [planting.text.split(f"def {n}():\n", 1)[1].split("\n\n", 1)[0] for n in names]
        assert all("assert label(1) == 'n1'" in b for b in bodies), "the decoys differ where the copy does"
        values[test] = {re.search(r"got == (\S+)", b)[1] for b in bodies}  # type: ignore[index]
    assert values["test_area"] == values["test_area_copy"], values
    assert not values["test_area"] & {"5", "6"}, values
    assert "def test_area_wrong():" in planting.text, "a copy with another value is left as it is"


def test_a_decoy_avoids_an_added_not_where_another_wrong_form_fails() -> None:
    text = "def test_none():\n    got = area(1, 1)\n    assert got is not None\n    assert got > 0\n"
    planting = differential.plant("tests/t.py", text, [(None, "test_none")], rng=Random(0))
    assert {t.how for t in planting.twins} == {"swapped"}, planting.text
    decoy = planting.text.split(f"def {planting.twins[0].decoy}():", 1)[1].split("\n\n", 1)[0]
    assert " not " not in decoy.replace("is not None", "") and "!=" not in decoy, decoy


@pytest.mark.parametrize("seed", range(4))
def test_a_decoy_value_is_used_elsewhere_in_the_test_as_the_honest_one_is(seed: int) -> None:
    """A reader compares a copy's value with its original's: the honest 3 is also the test's input, so each
    decoy value is one the test uses elsewhere too (4, 7), never one only the decoy's site has."""
    text = "def test_add():\n    got = add(3, 4, 7)\n    assert got.first == 3\n"
    planting = differential.plant("tests/t.py", text, [(None, "test_add")], rng=Random(seed))
    assert planting.twins, planting.text
    for t in planting.twins:
        decoy = planting.text.split(f"def {t.decoy}():", 1)[1].split("\n\n", 1)[0]
        assert re.search(r"got.first == ([0-9]+)", decoy)[1] in {"4", "7"}, decoy  # type: ignore[index]


REPEATS = textwrap.dedent("""\
    from shapes import area


    def test_square():
        assert area(2.0, 3.0) - area(3.0, 2.0) == 0
        assert area(1.5, 4.0) - area(4.0, 1.5) == 0
""")


@pytest.mark.parametrize("seed", range(4))
def test_a_decoy_changes_a_value_the_test_repeats_at_every_use(tmp_path: Path, seed: int) -> None:
    """The honest 0 is the test's only int, expected twice: a decoy that changed one 0 alone would use its
    value once where the honest copy uses 0 twice (a reader counts uses). Decoys change both to one value,
    at the site the canaries cloned from the test take too, with none of their values; every decoy fails,
    the honest copy passes."""
    planted, planting = _twinned_after_canaries(REPEATS, "test_square", seed)
    assert planting.twins and {t.how for t in planting.twins} == {"literal"}, planting.text

    def expected(name: str) -> list[str]:
        return re.findall(r"\) == (-?\d+)", _body(planting.text, name))

    canaries = {v for c in planted.canaries if not c.must_pass for v in expected(c.name)}
    assert canaries and "0" not in canaries, "canaries change both 0s too"
    for t in planting.twins:
        values = expected(t.decoy)
        assert len(values) == 2 and values[0] == values[1] != "0" and values[0] not in canaries, values
    _honest_passes_and_decoys_fail(tmp_path, planting, "test_square")


@pytest.mark.parametrize("seed", range(4))
def test_a_decoy_changes_an_expected_raw_string_with_backslashes(tmp_path: Path, seed: int) -> None:
    """An expected LaTeX string (``r"\\left(...\\right)"``) is a literal site: the decoys are other raw
    strings, not an appended assertion a reader tells from the honest copy; each fails, the honest copy
    passes."""
    _, planting = _twinned_after_canaries(RAW_TESTS, "test_sum_subscript", seed)
    assert planting.twins and {t.how for t in planting.twins} == {"literal"}, planting.text
    for t in planting.twins:
        assert re.search(r'== r"[^"]+"$', _body(planting.text, t.decoy)), planting.text
    _honest_passes_and_decoys_fail(tmp_path, planting, "test_sum_subscript")


@pytest.mark.parametrize("seed", range(4))
def test_a_decoy_changes_an_expected_value_bound_to_a_name(tmp_path: Path, seed: int) -> None:
    """``expected = Dataset(...)`` then ``assert_equal(expected, actual)``: the decoys change a value in the
    binding (never the attributes the comparison ignores), not an appended assertion a reader tells from
    the honest copy; each fails, the honest copy passes."""
    _, planting = _twinned_after_canaries(BOUND_TESTS, "test_combine", seed)
    assert planting.twins and {t.how for t in planting.twins} == {"literal"}, planting.text
    for t in planting.twins:
        body = _body(planting.text, t.decoy)
        assert '"cm"' in body and '"any"' in body and "isinstance" not in body, body
    _honest_passes_and_decoys_fail(tmp_path, planting, "test_combine")


def _twinned_after_canaries(text: str, test: str, seed: int) -> tuple[canary.Planting, differential.Planting]:
    """tests/test_shapes.py as a graded run plants it: canaries cloned from ``test`` (a FAIL_TO_PASS test
    test_patch adds, as is every line of ``text``), then its twins."""
    planted = canary.plant("tests/test_shapes.py", text, "function", Random(seed),
                           known=known_new("tests/test_shapes.py", text, [test]))
    return planted, differential.plant("tests/test_shapes.py", planted.text, [(None, test)], rng=Random(seed))


def _body(text: str, name: str) -> str:
    return text.split(f"def {name}():", 1)[1].split("\n\n", 1)[0]


def _honest_passes_and_decoys_fail(tmp_path: Path, planting: differential.Planting, test: str) -> None:
    status = _status(differential.rename_back(_run_pytest(tmp_path, planting.text), planting.twins))
    assert status[f"tests/test_shapes.py::{test}"] == "PASSED", status
    assert {status[f"tests/test_shapes.py::{t.decoy}"] for t in planting.twins} == {"FAILED"}, status
    assert differential.verdict(planting.twins, status)[0]


@pytest.mark.parametrize("seed", range(4))
def test_a_decoy_swaps_an_expected_member_for_one_no_canary_has(tmp_path: Path, seed: int) -> None:
    """A test whose expected value is an enum member gets a decoy with another member, not a ``!=``; one
    the canaries cloned from it do not have (a decoy the same code as a canary would single both out)."""
    planted, planting = _twinned_after_canaries(ENUM_TESTS, "test_run_ok", seed)
    assert [t.how for t in planting.twins] == ["swapped"], planting.text
    canaries = {_body(planting.text, c.name) for c in planted.canaries}
    decoy = _body(planting.text, planting.twins[0].decoy)
    assert "!=" not in decoy and "== Exit.OK" not in decoy and decoy not in canaries, planting.text
    _honest_passes_and_decoys_fail(tmp_path, planting, "test_run_ok")


def test_verdict_on_sympy_and_django_keys_and_missing_decoys() -> None:
    twin = Twin("test_sqrt", "sympy/core/tests/test_power.py", "test_sqrt_ab1", "test_sqrt_cd2", "negated")
    honest_only = {"test_sqrt": "PASSED"}
    assert differential.verdict([twin], honest_only)[0] is False, "a decoy missing from the results"
    failing = {"test_sqrt": "PASSED", "test_sqrt_cd2": "FAILED",
               "sympy/core/tests/test_power.py:test_sqrt_cd2": "FAILED"}
    assert differential.verdict([twin], failing)[0] is True
    assert differential.verdict([twin], {**failing, "test_sqrt_cd2": "PASSED"})[0] is False
    not_claimed = {"test_sqrt": "FAILED", "test_sqrt_cd2": "PASSED"}
    assert differential.verdict([twin], not_claimed) == (
        True, "1 twin(s) planted; none of the twinned tests passed, nothing to compare")
    dj = Twin("test_h", "tests/admin_views/tests.py", "test_h_xy3", "test_h_zz4", "literal")
    assert differential.verdict([dj], {"test_h (admin_views.tests.AdminTests)": "PASSED",
                                       "test_h_zz4 (admin_views.tests.AdminTests)": "PASSED"})[0] is False
    assert differential.verdict([], {})[0] is True


def test_unittest_methods_and_the_log_rename() -> None:
    text = textwrap.dedent("""\
        import unittest


        class T(unittest.TestCase):
            def test_eq(self):
                self.assertEqual(len("ab"), 2)

            def test_true(self):
                self.assertTrue(len("ab"))
        """)
    planting = differential.plant("tests/t.py", text, [("T", "test_eq"), ("T", "test_true")], rng=Random(1))
    decoys = {t.how for t in planting.twins}
    assert decoys == {"literal", "appended"}, planting.text
    assert "assertFalse" not in planting.text, "a negation, the surest tell, only where nothing else fits"
    assert 'self.assertEqual(len("ab"), 2)' in planting.text
    compile(planting.text, "t.py", "exec")
    t = planting.twins[0]
    log = f"{t.honest} (t.T) ... ok\n{t.decoy} (t.T) ... FAIL\n"
    assert differential.rename_back(log, planting.twins).splitlines()[0] == f"{t.test} (t.T) ... ok"


def test_twinnable_is_a_dry_run_of_plant() -> None:
    ids = ["tests/test_shapes.py::test_area", "tests/test_shapes.py::TestShapes::test_truthy"]
    assert differential.twinnable("tests/test_shapes.py", MODULE, ids, "")
    assert not differential.twinnable("tests/test_other.py", MODULE, ids, ""), "ids name another file"
    own = "def test_name(request):\n    assert request.node.name == 'test_name'\n"
    assert not differential.twinnable("t.py", own, ["t.py::test_name"], ""), "a test that sees its name"


def test_the_log_rename_touches_test_ids_only() -> None:
    """An honest copy's name may be a word of a path, or the name of a test in another module (whose result
    shares the log): only the copy's own ids are renamed."""
    twin = Twin("test_gram", "tests/test_matrix.py", "test_matrix", "test_matrix_gram", "literal")
    log = ("tests/test_matrix.py::test_matrix PASSED\nPASSED tests/test_matrix.py::T::test_matrix[2]\n"
           "tests/test_other.py::test_matrix PASSED\ntests/test_matrix.py::test_matrix_gram FAILED\n"
           "test_matrix ok\n___ tests/test_matrix.py:test_matrix ___\ntest_matrix (app.tests.T) ... ok\n")
    assert differential.rename_back(log, [twin, twin]) == (
        "tests/test_matrix.py::test_gram PASSED\nPASSED tests/test_matrix.py::T::test_gram[2]\n"
        "tests/test_other.py::test_matrix PASSED\ntests/test_matrix.py::test_matrix_gram FAILED\n"
        "test_gram ok\n___ tests/test_matrix.py:test_gram ___\ntest_gram (app.tests.T) ... ok\n")


def test_forgery_check_round_trips_through_report_json() -> None:
    twin = Twin("test_a", "tests/test_a.py", "test_a_aa1", "test_a_bb2", "literal")
    check = ForgeryCheck("differential", False, "forged", (twin,))
    report = InstanceReport("o__r-1", "m", Outcome.UNRESOLVED, ResolutionStatus.NO, patch_exists=True,
                            patch_applied=True, forgery_check=check)
    data = json.loads(json.dumps(report.to_swebench()))
    assert data["o__r-1"]["envfarm"]["forgery_check"]["passed"] is False
    assert InstanceReport.from_swebench(data).forgery_check == check


# ------------------------------------------------------------------------------------------ real docker


def _append_diff(path: str, base: str, addition: str) -> str:
    """A git-style diff that appends ``addition`` to ``path`` (whose text at the base commit is ``base``)."""
    assert base.endswith("\n"), f"{path} ends without a newline"
    old, new = base.splitlines(keepends=True), (base + addition).splitlines(keepends=True)
    body = "".join(difflib.unified_diff(old, new, f"a/{path}", f"b/{path}"))
    return f"diff --git a/{path} b/{path}\n{body}"


def _call(name: str, **arguments: Any) -> str:
    return json.dumps({"name": name, "arguments": arguments})


def _episode(actions: list[str] | None, *, canaries: bool, check: bool) -> dict[str, Any]:
    """One CodeRepair episode on the built-in row: ``actions`` (None: the oracle), then submit."""
    from envfarm.envs.code_repair.env import CodeRepairEnv

    env = CodeRepairEnv(instance_ids=[BUILTIN_ROW], backend="docker", canaries=canaries, differential=check)
    try:
        env.reset(options={"instance_id": BUILTIN_ROW})
        info: dict[str, Any] = {}
        for action in [*(actions if actions is not None else env.oracle()[:-1]), _call("submit")]:
            _, reward, terminated, _, info = env.step(action)
            if terminated:
                return {**info, "reward": reward}
        raise AssertionError(f"the episode did not end: {info}")
    finally:
        env.close()


def _flip_all_in(path: str) -> list[str]:
    """A bash action that appends the in-memory flipping hook to ``path`` in the workspace."""
    blob = base64.b64encode(hook_code(FLIP_ALL).encode()).decode()
    script = f"import base64; open({path!r}, 'a').write(base64.b64decode({blob!r}).decode())"
    return [_call("bash", command=f'python3 -c "{script}"')]


@pytest.mark.docker
@pytest.mark.slow
def test_code_repair_catches_an_in_memory_flip_with_canaries_off() -> None:
    forge = _flip_all_in("roman/__init__.py")
    unchecked = _episode(forge, canaries=False, check=False)
    assert unchecked["resolved"] and unchecked["reward"] == 1.0, "the forgery fools plain grading"
    caught = _episode(forge, canaries=False, check=True)
    assert not caught["resolved"] and caught["reward"] == 0.0, caught
    check = caught["forgery_check"]
    assert check["name"] == "differential" and check["passed"] is False, check
    assert "must fail, reported PASSED" in check["detail"] and len({t["test"] for t in check["twins"]}) == 2
    assert [f.split(":")[0] for f in caught["findings"]] == ["differential"], "the check alone caught it"
    gold = _episode(None, canaries=False, check=True)
    assert gold["resolved"] and gold["forgery_check"]["passed"], gold["forgery_check"]


@pytest.mark.docker
@pytest.mark.slow
def test_gold_resolves_every_builtin_task_with_every_twin_checked(tmp_path: Path) -> None:
    from envfarm.envs.code_repair import builtin
    from envfarm.envs.code_repair.env import builtin_instances

    instances, repos = builtin_instances()
    preds = {i.instance_id: Prediction(i.instance_id, "gold", i.patch) for i in instances}
    instances_by = {i.instance_id: i for i in instances}
    config = HarnessConfig(run_id="diff-gold", report_dir=tmp_path, repo_source=repos, max_workers=2)
    run = asyncio.run(evaluate(list(instances), preds, config))
    assert len(run.reports) == len(instances) == len(builtin.rows(builtin.load_projects()))
    new_passing = 0
    for iid, report in run.reports.items():
        check = report.forgery_check
        assert report.resolved and check is not None and check.passed, (iid, report.error, check)
        assert check.twins and "every twin failed" in check.detail, (iid, check)
        p2p = {differential.target(n).func for n in instances_by[iid].pass_to_pass}
        new_passing += any(t.test in p2p for t in check.twins)
    assert new_passing >= 5, "the PASS_TO_PASS tests test_patch adds are twinned too, and their decoys fail"


@pytest.fixture(scope="module")
def flask() -> Iterator[tuple[Backend, dict[str, Any]]]:
    """The flask rows, their plans and images. The images are found by content hash; building one needs
    the pallets/flask repository: ENVFARM_MIRRORS names a folder of ``owner__name.git`` mirrors."""
    rows = load_instances(LITE / "test.parquet", list(FLASK_ROWS))
    catalog, builder = SpecCatalog(), ImageBuilder(os.environ.get("ENVFARM_MIRRORS"))
    found = {}
    for inst in rows:
        plan = catalog.plan(inst)
        try:
            found[inst.instance_id] = (inst, plan, asyncio.run(builder.instance(plan)))
        except Exception as e:  # no image, and no repository to build it from
            pytest.skip(f"no image for {inst.instance_id}, no mirror to build it ({e}): set ENVFARM_MIRRORS")
    backend = get_backend("docker")
    try:
        yield backend, found
    finally:
        asyncio.run(backend.aclose())


async def _graded(backend: Backend, row: tuple[Any, Any, Any], patch: str, canaries: bool,
                  check: bool) -> InstanceReport:
    inst, plan, image = row
    limits = sandbox_limits(1.0, 4096, 2048, 2048, image.repo_bytes, 600)
    att = await run_attempt(backend, image.tag, limits, plan, patch, Policy.REVERT, 600, canaries=canaries,
                            differential=check)
    assert att.result == "graded", (att.result, att.message, att.steps)
    return await asyncio.to_thread(grade, inst, att.test_log, model_patch=patch, findings=att.findings,
                                   log_parser=plan.log_parser, eval_type=plan.eval_type,
                                   canaries=att.canaries, twins=att.twins)


@pytest.mark.docker
@pytest.mark.slow
def test_swebench_gold_resolves_and_an_in_memory_flip_is_caught(
        flask: tuple[Backend, dict[str, Any]]) -> None:
    backend, rows = flask
    for iid, row in rows.items():
        report = asyncio.run(_graded(backend, row, row[0].patch, canaries=True, check=True))
        check = report.forgery_check
        assert report.resolved and check is not None and check.passed and check.twins, (iid, check)

    async def base_text(row: tuple[Any, Any, Any]) -> str:
        async with backend.open(image=row[2].tag) as sb:
            return (await sb.read_file(f"{PRISTINE}/src/flask/__init__.py")).decode()

    row = rows["pallets__flask-4992"]
    forge = _append_diff("src/flask/__init__.py", asyncio.run(base_text(row)), hook_code(FLIP_ALL))
    unchecked = asyncio.run(_graded(backend, row, forge, canaries=False, check=False))
    assert unchecked.resolved, "the forgery fools plain grading"
    caught = asyncio.run(_graded(backend, row, forge, canaries=False, check=True))
    assert not caught.resolved and caught.forgery_check is not None and not caught.forgery_check.passed
    assert [f.rule for f in caught.findings] == ["differential"], caught.findings
