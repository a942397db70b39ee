"""Canary tests (harness/canary.py): planted code runs with the expected outcomes under real runners, and
the verdict names every way a forged log can miss them."""

from __future__ import annotations

import ast
import builtins
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from random import Random

import pytest
from newtests import BOUND_TESTS, ENUM_TESTS, RAW_TESTS, known_new

from envfarm.harness import _swebench, canary
from envfarm.harness.canary import Canary

MODULE = textwrap.dedent('''\
    """A test module."""
    import os


    def helper():
        return 1


    @pytest_mark_whatever
    def test_one():
        assert helper() == 1


    class TestThing:
        def test_two(self):
            assert os.sep
    ''').replace("@pytest_mark_whatever\n", "")


UNITTEST_MODULE = textwrap.dedent('''\
    import unittest


    class ThingTests(unittest.TestCase):
        def test_sum(self):
            self.assertEqual(sum([1, 2]), 3)

        def test_words(self):
            self.assertEqual("a b".split(), ["a", "b"])
            self.assertTrue("a b".startswith("a"))
    ''')


def _results(tmp_path: Path, text: str, runner: str) -> str:
    path = tmp_path / "test_mod.py"
    path.write_text(text)
    if runner == "pytest":
        cmd = [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", str(path)]
    else:
        cmd = [sys.executable, "-m", "unittest", "-v", "test_mod"]
    res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    return res.stdout + res.stderr


@pytest.mark.parametrize("seed", range(6))
def test_planted_functions_pass_and_fail_as_declared_under_pytest(tmp_path: Path, seed: int) -> None:
    planting = canary.plant("tests/test_mod.py", MODULE, "function", Random(seed), count=(3, 3))
    compile(planting.text, "test_mod.py", "exec")
    out = _results(tmp_path, planting.text, "pytest")
    status = _swebench.load().log_parsers.PARSER_REGISTRY["parse_log_pytest"](out, None)
    assert canary.verdict(planting.canaries, status) == [], out
    own = (status["test_mod.py::test_one"], status["test_mod.py::TestThing::test_two"])
    assert own == ("PASSED", "PASSED"), "the module's own tests still run"
    assert sum(c.must_pass for c in planting.canaries) == 3 and len(planting.canaries) == 6


@pytest.mark.parametrize("seed", range(3))
def test_planted_unittest_class_passes_and_fails_as_declared(tmp_path: Path, seed: int) -> None:
    planting = canary.plant("tests/test_mod.py", MODULE, "unittest", Random(seed))
    out = _results(tmp_path, planting.text, "unittest")
    status = _swebench.load().log_parsers.PARSER_REGISTRY["parse_log_django"](out, None)
    assert canary.verdict(planting.canaries, status) == [], out


def test_names_are_fresh_per_run_and_avoid_the_modules_own_names() -> None:
    names = [{c.name for c in canary.plant("t.py", MODULE, "function").canaries} for _ in range(6)]
    assert len({frozenset(n) for n in names}) > 1, "names are drawn per call"
    words = set(re.findall(r"\w+", MODULE))
    assert not any(n & words for n in names)
    known = canary.known_for(["t.py::test_one_two"], [], "")
    for seed in range(10):
        planted = canary.plant("t.py", MODULE, "function", Random(seed), known=None)
        assert all(c.name not in words for c in planted.canaries)
        assert "test_one_two" not in {c.name for c in canary.plant("t.py", MODULE, "function", Random(seed),
                                                                    known=known).canaries}


def test_unparsable_modules_get_canaries_at_the_end() -> None:
    planting = canary.plant("t.py", "print 'python 2'\n", "function", Random(0))
    assert planting.text.startswith("print 'python 2'\n")


def test_verdict_names_missing_flipped_and_wrong_canaries() -> None:
    good, bad = Canary("test_a_b_3", True, "t.py"), Canary("test_c_d_4", False, "t.py")
    ok = {"t.py::test_a_b_3": "PASSED", "t.py::test_c_d_4": "FAILED", "t.py::test_x": "PASSED"}
    assert canary.verdict([good, bad], ok) == []
    flipped = {**ok, "t.py::test_c_d_4": "PASSED"}
    [f] = canary.verdict([good, bad], flipped)
    assert (f.rule, f.action, f.blocks_resolution) == ("canary", "flagged", True)
    assert "test_c_d_4 must fail, reported PASSED" in f.detail
    [m] = canary.verdict([good, bad], {"t.py::test_c_d_4": "FAILED", "t.py::test_a_b_30": "PASSED"})
    assert "test_a_b_3 is missing" in m.detail, "a longer name that contains it does not count"
    sympy_style = {"test_a_b_3": "PASSED", "test_c_d_4": "FAILED", "sympy/t.py:test_c_d_4": "FAILED"}
    assert canary.verdict([good, bad], sympy_style) == []


def test_completeness_flags_missing_and_repeated_tests() -> None:
    sw = _swebench.load()
    parse = sw.log_parsers.PARSER_REGISTRY["parse_log_pytest"]
    log = "PASSED t.py::test_a\nPASSED t.py::test_b\nFAILED t.py::test_b - boom\n"
    status = parse(log, None)
    results = canary.line_results(log, lambda line: parse(line, None))
    findings = canary.completeness(["t.py::test_a", "t.py::test_b", "t.py::test_c"], status,
                                   sw.grading._resolve_case, results)
    assert [f.rule for f in findings] == ["missing-tests", "missing-tests"]
    assert "t.py::test_c" in findings[0].detail and "t.py::test_b (x2: FAILED/PASSED)" in findings[1].detail
    once = "PASSED t.py::test_a\n"
    assert canary.completeness(["t.py::test_a"], parse(once, None), sw.grading._resolve_case,
                               canary.line_results(once, lambda line: parse(line, None))) == []

    nested = "PASSED t.py::test_a\nPASSED                                   [100%]\nPASSED         [100%]\n"
    assert canary.completeness(["t.py::test_a", "[100%]"], parse(nested, None), sw.grading._resolve_case,
                               canary.line_results(nested, lambda line: parse(line, None))) == [], (
        "pytest's progress column in a nested run's output (SWE-bench's lists name it) is no repeated test"
    )


def test_module_choice_prefers_files_the_command_names() -> None:
    files = ("tests/test_a.py", "tests/data.json", "src/helpers.py", "tests/test_b.py")
    order = canary.pick_module(files, "pytest -rA tests/test_b.py", Random(0))
    assert order == ["tests/test_b.py", "tests/test_a.py"]
    sympy = ("sympy/testing/quality_unicode.py", "sympy/parsing/tests/test_x.py")
    assert canary.pick_module(sympy, "bin/test -C --verbose " + " ".join(sympy), Random(0)) == [
        "sympy/parsing/tests/test_x.py", "sympy/testing/quality_unicode.py"
    ], "a helper module the command passes is the last resort"
    assert canary.style_for("parse_log_django") == "unittest"
    styles = (canary.style_for("parse_log_sympy"), canary.style_for("parse_log_pytest"))
    assert styles == ("sympy", "function")


@pytest.mark.parametrize(("style", "text"), [("function", MODULE), ("unittest", UNITTEST_MODULE),
                                            ("function", "import os\n\n\ndef test_a():\n    os.getcwd()\n")])
def test_canary_code_names_what_real_tests_name(style: str, text: str) -> None:
    """A forger that flips only failures of tests naming something beyond builtins (bench/exploits.py's
    *-selective variants) must flip the canaries too: copies name what their originals name, synthetic ones
    a module import."""
    import builtins

    planting = canary.plant("t.py", text, style, Random(3))
    space: dict[str, object] = {}
    exec(compile(planting.text, "t.py", "exec"), space)
    for c in planting.canaries:
        holder = next((v for v in space.values() if hasattr(v, c.name)), None)
        fn = getattr(holder, c.name) if holder is not None else space[c.name]
        names = fn.__code__.co_names  # type: ignore[attr-defined]
        assert any(not hasattr(builtins, n) for n in names), names


def test_canaries_never_follow_the_last_test_under_sympy() -> None:
    """sympy's verbose runner prints the file's [OK]/[FAIL] on its last test's line (unparsable there);
    pytest has no such rule, and there copies go after the last test as often as elsewhere."""
    text = ("import os\n\n\ndef test_a():\n    assert os.sep == '/'\n\n\n"
            "def test_b():\n    assert os.sep * 2 == '//'\n\n\ndef helper():\n    pass\n")
    after = 0
    for seed in range(20):
        for style in ("sympy", "function"):
            planting = canary.plant("t.py", text, style, Random(seed))  # type: ignore[arg-type]
            last = max(planting.text.index(f"def {c.name}(") for c in planting.canaries)
            assert style == "function" or planting.text.index("def test_b():") > last
            after += style == "function" and planting.text.index("def test_b():") < last
    assert after


def test_cut_parametrized_ids_may_repeat() -> None:
    """swebench's parser cuts ids at spaces, so two cases of one parametrized test can share a key."""
    sw = _swebench.load()
    parse = sw.log_parsers.PARSER_REGISTRY["parse_log_pytest"]
    log = 'PASSED t.py::test_f[a("x", 1)]\nPASSED t.py::test_f[a("x", 2)]\n'
    results = canary.line_results(log, lambda line: parse(line, None))
    assert canary.completeness(['t.py::test_f[a("x",'], parse(log, None), sw.grading._resolve_case,
                               results) == []


@pytest.mark.parametrize("seed", range(8))
def test_imports_named_like_canary_locals_are_no_anchor(tmp_path: Path, seed: int) -> None:
    """A module importing ``total`` (say) must not make a canary read its own local before assignment."""
    text = "from math import fsum as total, prod as acc\nimport os as got\n\n\ndef test_one():\n    pass\n"
    planting = canary.plant("tests/test_mod.py", text, "function", Random(seed))
    out = _results(tmp_path, planting.text, "pytest")
    status = _swebench.load().log_parsers.PARSER_REGISTRY["parse_log_pytest"](out, None)
    assert canary.verdict(planting.canaries, status) == [], out
    assert "UnboundLocalError" not in out


def test_a_bare_name_two_files_report_alike_is_no_repeat() -> None:
    """sympy's runner names tests without their file: sympy__sympy-22080 runs two files that both define
    test_sqrt, and gold passed both. One outcome twice cannot change the verdict; two outcomes are flagged."""
    sw = _swebench.load()
    parse = sw.log_parsers.PARSER_REGISTRY["parse_log_sympy"]
    alike = "test_sqrt ok\ntest_frac ok\ntest_sqrt ok\n"
    assert canary.completeness(["test_sqrt", "test_frac"], parse(alike, None), sw.grading._resolve_case,
                               canary.line_results(alike, lambda line: parse(line, None))) == []
    forged = "test_sqrt F\ntest_frac ok\ntest_sqrt ok\n"
    [finding] = canary.completeness(["test_sqrt", "test_frac"], parse(forged, None), sw.grading._resolve_case,
                                    canary.line_results(forged, lambda line: parse(line, None)))
    assert "test_sqrt (x2: FAILED/PASSED)" in finding.detail


# ---------------------------------------------------------------------------------------------- derived

HEAD = textwrap.dedent('''\
    from datetime import date

    from shop import Cart, total


    def test_empty_cart():
        assert total(Cart()) == 0


    def test_single_item():
        cart = Cart()
        cart.add("apple", 3)
        assert total(cart) == 3
    ''')
ADDED = textwrap.dedent('''\


    def test_discount_applies_once():
        cart = Cart(discount=2)
        cart.add("pear", 5)
        cart.add("plum", 4)
        assert total(cart) == 7
        assert cart.items == {"pear": 5, "plum": 4}


    def test_due_date_is_a_week_later():
        cart = Cart()
        assert cart.due(date(2024, 3, 13)) == date(2024, 3, 20)
    ''')
SHOP = textwrap.dedent('''\
    from datetime import timedelta


    class Cart:
        def __init__(self, discount=0):
            self.discount, self.items = discount, {}

        def add(self, name, price):
            self.items[name] = price

        def due(self, day):
            return day + timedelta(days=7)


    def total(cart):
        return max(0, sum(cart.items.values()) - cart.discount)
    ''')
TEST_PATCH = "--- a/tests/test_shop.py\n+++ b/tests/test_shop.py\n@@ -13,0 +14,14 @@\n" + "".join(
    f"+{line}\n" for line in ADDED.splitlines())
F2P = ["tests/test_shop.py::test_discount_applies_once", "tests/test_shop.py::test_due_date_is_a_week_later"]
P2P = ["tests/test_shop.py::test_empty_cart", "tests/test_shop.py::test_single_item"]


def _shop_results(tmp_path: Path, text: str) -> dict[str, str]:
    (tmp_path / "shop.py").write_text(SHOP)
    (tmp_path / "tests").mkdir(exist_ok=True)
    (tmp_path / "tests" / "test_shop.py").write_text(text)
    cmd = [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "tests/test_shop.py"]
    res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    return _swebench.load().log_parsers.PARSER_REGISTRY["parse_log_pytest"](res.stdout, None)


def _functions(text: str) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)}


def test_row_lists_tell_what_test_patch_adds_and_what_passes() -> None:
    known = canary.known_for(F2P, P2P, TEST_PATCH)
    assert known.added == {("tests/test_shop.py", "test_discount_applies_once"),
                           ("tests/test_shop.py", "test_due_date_is_a_week_later")}
    assert known.listed(known.failing, "tests/test_shop.py", None, "test_discount_applies_once")
    assert not known.listed(known.failing, "tests/test_shop.py", None, "test_single_item")
    assert known.listed(known.passing, "tests/test_shop.py", None, "test_single_item")
    django = canary.known_for(["test_sum (app.tests.ThingTests)"], [], "")
    assert django.listed(django.failing, "app/tests.py", "ThingTests", "test_sum")
    sympy = canary.known_for(["test_sqrt"], [], "")
    assert sympy.listed(sympy.failing, "sympy/core/tests/test_a.py", None, "test_sqrt")


@pytest.mark.parametrize("seed", range(5))
def test_canaries_are_copies_of_added_tests_that_fail_only_when_they_run(tmp_path: Path, seed: int) -> None:
    text = HEAD + ADDED
    known = canary.known_for(F2P, P2P, TEST_PATCH)
    planting = canary.plant("tests/test_shop.py", text, "function", Random(seed), known=known)
    assert planting.derived and planting.hidden
    status = _shop_results(tmp_path, planting.text)
    assert canary.verdict(planting.canaries, status) == [], status
    assert all(status[f] == "PASSED" for f in F2P + P2P), "the row's own tests still pass with the fix"
    fns, own = _functions(planting.text), _functions(text)
    sources = [own["test_discount_applies_once"], own["test_due_date_is_a_week_later"]]
    for c in planting.canaries:
        copy = fns[c.name]
        copy.name = "x"
        diffs = []
        for src in sources:
            src.name = "x"
            pairs = zip(ast.dump(copy).split(","), ast.dump(src).split(","), strict=False)
            diffs.append(sum(a != b for a, b in pairs))
        assert min(diffs) == (0 if c.must_pass else 1), (c, ast.unparse(copy))
    assert any(not c.must_pass for c in planting.canaries)


def test_counts_names_values_and_places_vary_per_planting() -> None:
    known = canary.known_for(F2P, P2P, TEST_PATCH)
    plantings = [canary.plant("tests/test_shop.py", HEAD + ADDED, "function", Random(s), known=known)
                 for s in range(30)]
    assert len({len(p.canaries) for p in plantings}) > 1
    assert len({p.text for p in plantings}) == len(plantings)
    for p in plantings:
        names = [n.name for n in ast.parse(p.text).body if isinstance(n, ast.FunctionDef)]
        assert names[:2] == ["test_empty_cart", "test_single_item"], "placed among the tests test_patch adds"
        snake = all(re.fullmatch(r"test(_[a-z0-9]+)+", c.name) for c in p.canaries)
        assert snake, "snake_case like the module"


def test_tests_off_the_lists_are_never_copied() -> None:
    known = canary.known_for(F2P[:1], P2P, TEST_PATCH)
    for seed in range(10):
        planting = canary.plant("tests/test_shop.py", HEAD + ADDED, "function", Random(seed), known=known)
        fns = _functions(planting.text)
        for c in planting.canaries:
            assert ".due(" not in ast.unparse(fns[c.name]), "test_due_date_is_a_week_later is not listed"


def test_module_choice_prefers_modules_test_patch_adds_failing_tests_to() -> None:
    patch = TEST_PATCH.replace("test_shop.py", "test_b.py")
    known = canary.known_for(["tests/test_b.py::test_discount_applies_once"], [], patch)
    for seed in range(5):
        files = ("tests/test_a.py", "tests/test_b.py")
        order = canary.pick_module(files, "pytest tests/", Random(seed), known)
        assert order[0] == "tests/test_b.py"


@pytest.mark.parametrize("seed", range(4))
def test_unittest_methods_are_copied_into_their_class(tmp_path: Path, seed: int) -> None:
    planting = canary.plant("tests/test_mod.py", UNITTEST_MODULE, "unittest", Random(seed))
    assert planting.derived
    out = _results(tmp_path, planting.text, "unittest")
    status = _swebench.load().log_parsers.PARSER_REGISTRY["parse_log_django"](out, None)
    assert canary.verdict(planting.canaries, status) == [], out
    [cls] = [n for n in ast.parse(planting.text).body if isinstance(n, ast.ClassDef)]
    assert {c.name for c in planting.canaries} <= {f.name for f in cls.body if isinstance(f, ast.FunctionDef)}


def test_a_module_without_assertions_gets_synthetic_canaries(tmp_path: Path) -> None:
    text = "import os\n\n\ndef test_runs():\n    os.getcwd()\n"
    planting = canary.plant("tests/test_mod.py", text, "function", Random(0))
    assert not planting.derived and planting.canaries
    out = _results(tmp_path, planting.text, "pytest")
    status = _swebench.load().log_parsers.PARSER_REGISTRY["parse_log_pytest"](out, None)
    assert canary.verdict(planting.canaries, status) == [], out


def test_a_canary_named_like_its_module_is_judged_by_its_own_result_only() -> None:
    """A canary called ``test_matrix`` in tests/test_matrix.py: the module's other tests are not its
    results (its name is a word of their ids), and the planter does not draw such a name."""
    c = canary.Canary("test_matrix", False, "tests/test_matrix.py")
    status = {"tests/test_matrix.py::test_solve": "PASSED", "tests/test_matrix.py::test_matrix": "FAILED"}
    assert canary.verdict([c], status) == []
    status["tests/test_matrix.py::test_matrix"] = "PASSED"
    assert canary.verdict([c], status)
    text = "def test_matrix_sum():\n    assert 1 + 1 == 2\n\n\ndef test_sum():\n    assert 2 == 2\n"
    for seed in range(30):
        planting = canary.plant("tests/test_matrix.py", text, canary.style_for("parse_log_pytest"),
                                Random(seed))
        assert all(p.name != "test_matrix" for p in planting.canaries)


FORMS = textwrap.dedent('''\
    from decimal import Decimal

    import pytest


    def test_truth_forms():
        assert not [].count(1)
        assert {}.get("a") is None


    def test_true_is_true():
        assert (1 == 1) is True


    def test_order():
        assert len("ab") < len("abc")


    def test_list_display():
        assert sorted({3, 1, 2}) == [1, 2, 3]


    def test_single_element():
        assert [x for x in (Decimal("1"),)] == [Decimal("1")]


    def test_approx_and_decimal():
        assert 0.1 + 0.2 == pytest.approx(0.3)
        assert Decimal("0.10") + Decimal("0.20") == Decimal("0.30")


    def test_escaped_string():
        assert "a\\nb".upper() == "A\\nB"
    ''')
FORM_TESTS = [n.name for n in ast.parse(FORMS).body if isinstance(n, ast.FunctionDef)]


def _forms_known() -> canary.Known:
    ids = [f"tests/test_mod.py::{n}" for n in FORM_TESTS]
    patch = "--- /dev/null\n+++ b/tests/test_mod.py\n" + "".join(f"+{x}\n" for x in FORMS.splitlines())
    return canary.known_for(ids, [], patch)


@pytest.mark.parametrize("seed", range(6))
def test_every_added_test_gets_a_copy_and_every_form_fails_when_it_runs(tmp_path: Path, seed: int) -> None:
    """Swapped truth forms, orders, dropped or repeated list elements, approx and Decimal values: each
    must-fail copy fails, each must-pass copy and each original passes; no added test is left without a
    copy (a test with no twin would be real)."""
    planting = canary.plant("tests/test_mod.py", FORMS, "function", Random(seed), known=_forms_known())
    assert planting.derived and planting.hidden
    out = _results(tmp_path, planting.text, "pytest")
    status = _swebench.load().log_parsers.PARSER_REGISTRY["parse_log_pytest"](out, None)
    assert canary.verdict(planting.canaries, status) == [], out
    assert all(status[f"test_mod.py::{n}"] == "PASSED" for n in FORM_TESTS), out
    fns = _functions(planting.text)
    bodies = {n: ast.dump(ast.Module(fns[n].body, [])) for n in fns}
    for n in FORM_TESTS:
        first = fns[n].body
        copies = [c for c in planting.canaries if len(fns[c.name].body) == len(first) and sum(
            ast.dump(a) != ast.dump(b) for a, b in zip(fns[c.name].body, first, strict=True)) <= 1]
        assert copies or bodies[n] in {bodies[c.name] for c in planting.canaries}, n


def test_no_not_is_added_where_another_form_fails(tmp_path: Path) -> None:
    """Tests with no value to change: `assert not x` and `x is None` are rewritten in another form that
    fails (not always by adding a `not`), an order is reversed, a list element dropped or repeated."""
    text = "\n\n\n".join(FORMS.split("\n\n\n")[i] for i in (0, 1, 2, 3)) + textwrap.dedent('''\



        def test_list_of_calls():
            assert [str(x) for x in (1, 2)] == [str(1), str(2)]
        ''')
    names = [n.name for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)]
    patch = "--- /dev/null\n+++ b/tests/test_mod.py\n" + "".join(f"+{x}\n" for x in text.splitlines())
    known = canary.known_for([f"tests/test_mod.py::{n}" for n in names], [], patch)
    seen: set[str] = set()
    for seed in range(30):
        planting = canary.plant("tests/test_mod.py", text, "function", Random(seed), known=known)
        fns = _functions(planting.text)
        seen |= {ast.unparse(s) for c in planting.canaries if not c.must_pass for s in fns[c.name].body}
        if seed < 3:
            out = _results(tmp_path, planting.text, "pytest")
            status = _swebench.load().log_parsers.PARSER_REGISTRY["parse_log_pytest"](out, None)
            assert canary.verdict(planting.canaries, status) == [], out
    assert "assert [].count(1)" in seen
    assert {"assert {}.get('a') is False", "assert {}.get('a')"} <= seen
    assert "assert (1 == 1) is False" in seen
    assert {"assert len('ab') > len('abc')", "assert len('ab') >= len('abc')"} & seen
    assert {"assert [str(x) for x in (1, 2)] == [str(2)]",
            "assert [str(x) for x in (1, 2)] == [str(1), str(1), str(2)]"} & seen


def test_an_originals_rank_in_its_group_is_uniform() -> None:
    """Copies go before or after their original so that its rank among them is uniform: the first of a
    group is the original no more often than chance."""
    first = groups = 0
    for seed in range(60):
        planting = canary.plant("tests/test_mod.py", FORMS, "function", Random(seed), known=_forms_known())
        order = [n.name for n in ast.parse(planting.text).body if isinstance(n, ast.FunctionDef)]
        fns = _functions(planting.text)
        names = {c.name for c in planting.canaries}
        for n in FORM_TESTS:
            src = ast.dump(ast.Module(fns[n].body, []))
            group = [m for m in order
                     if m == n or (m in names and ast.dump(ast.Module(fns[m].body, [])) == src)]
            if len(group) == 2:
                groups += 1
                first += group[0] == n
    assert groups > 50 and 0.3 < first / groups < 0.7, (first, groups)


def test_copies_are_named_no_longer_than_the_modules_tests() -> None:
    """sympy's runner prints ``name ok`` on an 80-column line: a longer name's result wraps onto a line of
    its own, where the parser misses it (a must-pass copy would be reported missing and gold unresolved)."""
    name = "test_auto_point_vel_if_tree_has_vel_but_inappropriate_pos_vector"
    text = f"def {name}():\n    assert 1 + 1 == 2\n\n\ndef test_b():\n    assert [1, 2] == [1, 2]\n"
    patch = "--- /dev/null\n+++ b/sympy/tests/test_p.py\n" + "".join(f"+{x}\n" for x in text.splitlines())
    known = canary.known_for([name, "test_b"], [], patch)
    for seed in range(40):
        planting = canary.plant("sympy/tests/test_p.py", text, "sympy", Random(seed), known=known)
        assert all(len(c.name) <= len(name) for c in planting.canaries), planting.canaries


MARKED = textwrap.dedent('''\
    import unittest

    import pytest


    @pytest.mark.filterwarnings("ignore::DeprecationWarning")
    def test_marked():
        assert r"a-b".split("-") == [r"a", r"b"]


    def test_raises():
        with pytest.raises(ValueError):
            int("x")


    @pytest.mark.parametrize("n", [1, 2])
    def test_parametrized(n):
        assert n in (1, 2)


    class Base(unittest.TestCase):
        pass


    class ThingSuite(Base):
        def test_in_a_testcase(self):
            self.assertEqual(len("ab"), 2)
    ''')
MARKED_TESTS = ["test_marked", "test_raises", "test_parametrized", "ThingSuite::test_in_a_testcase"]


@pytest.mark.parametrize("seed", range(4))
def test_marked_raising_and_testcase_tests_are_copied_and_fail_when_run(tmp_path: Path, seed: int) -> None:
    """Tests under a pytest mark that neither skips nor parametrizes are copied with the mark; a
    ``raises(E)`` copy expects an unrelated exception class; a raw string stays raw; ``TestCase`` classes
    pytest collects whatever their name are sources; parametrized tests never are."""
    ids = [f"tests/test_mod.py::{n}" for n in MARKED_TESTS]
    patch = "--- /dev/null\n+++ b/tests/test_mod.py\n" + "".join(f"+{x}\n" for x in MARKED.splitlines())
    known = canary.known_for(ids, [], patch)
    planting = canary.plant("tests/test_mod.py", MARKED, "function", Random(seed), known=known)
    assert planting.derived and planting.hidden
    out = _results(tmp_path, planting.text, "pytest")
    status = _swebench.load().log_parsers.PARSER_REGISTRY["parse_log_pytest"](out, None)
    assert canary.verdict(planting.canaries, status) == [], out
    tree = ast.parse(planting.text)
    fns = {f.name: f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)}
    copies = {c.name: fns[c.name] for c in planting.canaries}
    assert all("parametrize" not in ast.unparse(f) for f in copies.values()), "parametrized: never copied"
    in_class = {f.name for c in tree.body if isinstance(c, ast.ClassDef) for f in c.body
                if isinstance(f, ast.FunctionDef)}
    assert in_class & set(copies), "the TestCase's test has copies in its class"
    for c in planting.canaries:
        text = ast.get_source_segment(planting.text, copies[c.name], padded=False) or ""
        body = "".join(ast.unparse(x) for x in copies[c.name].body)
        if "split" in body:
            assert [ast.unparse(d) for d in copies[c.name].decorator_list] == [
                "pytest.mark.filterwarnings('ignore::DeprecationWarning')"]
            assert text.count('r"') == 3 and "'" not in text.split("==")[1], "raw strings stay raw"
        if "pytest.raises" in body and not c.must_pass:
            [call] = [n for n in ast.walk(copies[c.name]) if isinstance(n, ast.Call) and ast.unparse(
                n.func) == "pytest.raises"]
            new = getattr(builtins, ast.unparse(call.args[0]))
            assert not issubclass(new, ValueError) and not issubclass(ValueError, new), ast.unparse(call)


def test_sympy_values_and_raises_are_sites_without_a_not() -> None:
    """A value built by a sympy constructor the module imports (``sqrt(5)``, ``Float(16)``) is a literal
    site; sympy's ``raises(E, f)`` gets another exception class; neither needs a negation."""
    from envfarm.harness.canary_sites import failure_sites

    text = textwrap.dedent('''\
        from sympy import Float, sqrt
        from sympy.testing.pytest import raises


        def test_values():
            assert p.distance(q) == sqrt(5)
            assert f(2).evalf() == Float(16)


        def test_other_calls():
            assert p.distance(q) == root(5)


        def test_raising():
            raises(TypeError, lambda: q([1, 2]))
        ''')
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    sites = {f.name: failure_sites(f, lines, tree) for f in tree.body if isinstance(f, ast.FunctionDef)}
    assert [s[0][4] for s in sites["test_values"]] == ["5", "16"]
    assert all("!=" in s[0][4] for s in sites["test_other_calls"]), "other calls: no value site"
    swapped = {s[0][4] for s in sites["test_raising"]}
    assert swapped and "TypeError" not in swapped and not swapped & {"Exception", "BaseException"}
    # what the code raises may derive from two of these families (numpy's AxisError: ValueError and
    # IndexError), so a swap never goes from one to another
    assert not swapped & {"ValueError", "KeyError", "IndexError", "AttributeError", "OSError"}


@pytest.mark.parametrize("literal", ["1e20", "123456789.0", "-3e300", "0.5"])
def test_a_new_float_value_is_never_the_old_one_spelled_otherwise(literal: str) -> None:
    """Where ``+ 0.5`` leaves a float as it is (or within approx's tolerance), the copy gets a value far off:
    an unchanged value would make a must-fail copy pass."""
    from envfarm.harness.canary_clone import _distinct, choose_value

    text = f"def test_big():\n    assert big() == {literal}\n"
    node = ast.parse(text).body[0]
    start = text.splitlines()[1].index(literal)
    site = (2, start, 2, start + len(literal), literal)
    taken = [literal]
    for seed in range(3):
        new = choose_value(site, text.splitlines(keepends=True), node, ast.parse(text), Random(seed),
                           taken)[4]  # type: ignore[arg-type]
        assert _distinct(float(literal), ast.literal_eval(new)), (literal, new)
    assert len(set(taken)) == len(taken) == 4


HUGE_EXPONENT = textwrap.dedent('''\
    def test_huge():
        assert str(big(1)) == "1.339148777e+49714987269413385435"


    def test_huger():
        assert str(big(2)) == "4.946362032e+4971498726941338543512682882"
''')


@pytest.mark.timeout(60)
def test_a_number_in_a_string_with_a_huge_exponent_plants_at_once() -> None:
    """sympy's evalf tests compare with strings such as ``"1.3e+49714987269413385435"``: read as a
    Fraction, the whole power would be built (no planting would finish); the copies get other numbers."""
    from envfarm.harness.canary_clone import _distinct

    assert _distinct("1.339148777e+49714987269413385435", "1.339148777e+49714987269413385436")
    assert not _distinct("1.5e+4971498726941", "15e+4971498726940")  # one number, spelled otherwise
    assert not _distinct("0.5", "1/2") and _distinct("1/3", "0.3")
    ids = ["tests/test_big.py::test_huge", "tests/test_big.py::test_huger"]
    added = "".join(f"+{x}\n" for x in HUGE_EXPONENT.splitlines())
    patch = "--- /dev/null\n+++ b/tests/test_big.py\n" + added
    known = canary.known_for(ids, [], patch)
    planting = canary.plant("tests/test_big.py", HUGE_EXPONENT, "function", Random(0), known=known)
    assert [c for c in planting.canaries if not c.must_pass]
    compile(planting.text, "tests/test_big.py", "exec")


def test_a_seeded_planting_does_not_depend_on_the_hash_seed() -> None:
    """The bench's plantings are seeded; a word drawn from a set of strings would follow the hash seed."""
    code = ("import random\nfrom envfarm.harness import canary\n"
            f"print(canary.plant('tests/test_mod.py', {MODULE!r}, 'function', random.Random(3),"
            " count=(3, 3)).text)")
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2", "3")}
    assert len(runs) == 1 and "def test" in runs.pop()


REPEATED = textwrap.dedent('''\
    import subprocess
    import sys


    def test_exit_codes():
        run = subprocess.run([sys.executable, "-c", "pass"])
        assert run.returncode == 0
        again = subprocess.run([sys.executable, "-c", "pass"])
        assert again.returncode == 0
''')


@pytest.mark.parametrize("seed", range(4))
def test_a_value_the_test_repeats_changes_at_every_use(tmp_path: Path, seed: int) -> None:
    """The test's only number is its expected 0, used twice: a copy that changed one use alone would use its
    value once where the original uses 0 twice (a reader counts uses), so a must-fail copy changes both to
    one value, and still fails when it runs."""
    planting, wrong = _plant_new(REPEATED, ["test_exit_codes"], seed)
    for copy in wrong:
        values = [n.comparators[0].value for n in ast.walk(copy) if isinstance(n, ast.Compare)]
        assert len(values) == 2 and values[0] == values[1] != 0, ast.unparse(copy)
    status = _as_declared(tmp_path, planting)
    assert status["test_mod.py::test_exit_codes"] == "PASSED", status


def _plant_new(text: str, failing: list[str], seed: int) -> tuple[canary.Planting, list[ast.FunctionDef]]:
    """Canaries in tests/test_mod.py, every line of ``text`` added by test_patch, ``failing`` its
    FAIL_TO_PASS tests; and the must-fail copies, parsed."""
    planting = canary.plant("tests/test_mod.py", text, "function", Random(seed),
                            known=known_new("tests/test_mod.py", text, failing))
    fns = _functions(planting.text)
    wrong = [fns[c.name] for c in planting.canaries if not c.must_pass]
    assert wrong, planting.text
    return planting, wrong


def _as_declared(tmp_path: Path, planting: canary.Planting) -> dict[str, str]:
    """The planted module's results under pytest, once every canary came out as declared."""
    out = _results(tmp_path, planting.text, "pytest")
    status = _swebench.load().log_parsers.PARSER_REGISTRY["parse_log_pytest"](out, None)
    assert canary.verdict(planting.canaries, status) == [], out
    return status


@pytest.mark.parametrize("seed", range(4))
def test_an_expected_enum_member_is_swapped_for_another_not_negated(tmp_path: Path, seed: int) -> None:
    """``result.ret == ExitCode.OK`` has no literal: its copy compares with another member the module names
    (no ``!=``, which would single the copy out), and fails when it runs."""
    planting, wrong = _plant_new(ENUM_TESTS, ["test_run_ok", "test_run_fails"], seed)
    for copy in wrong:
        text = ast.unparse(copy)
        assert "!=" not in text and re.search(r"== Exit\.(OK|FAILED|USAGE|INTERNAL)$", text), text
    _as_declared(tmp_path, planting)


@pytest.mark.parametrize("seed", range(4))
def test_an_expected_raw_string_with_backslashes_takes_another_raw_string(tmp_path: Path, seed: int) -> None:
    """``== r"\\left(A\\right)_{0}"`` is an expected literal like any other: its copy compares with another
    raw string (no ``!=``), and fails when it runs."""
    planting, wrong = _plant_new(RAW_TESTS, ["test_subscript", "test_sum_subscript"], seed)
    for copy in wrong:
        text = ast.get_source_segment(planting.text, copy) or ""
        assert "!=" not in text and re.search(r'== r"[^"]+"$', text), text
    _as_declared(tmp_path, planting)


@pytest.mark.parametrize("seed", range(4))
def test_an_expected_value_bound_to_a_name_is_a_literal_site(tmp_path: Path, seed: int) -> None:
    """``expected = Dataset(...)`` then ``assert_equal(expected, actual)``: the copies change a value in the
    binding (data, dimensions, coordinates; never the attributes, which the comparison ignores), add no
    assertion and no ``not``, and fail when they run."""
    planting, wrong = _plant_new(BOUND_TESTS, ["test_combine", "test_cumsum"], seed)
    for copy in wrong:
        text = ast.get_source_segment(planting.text, copy) or ""
        assert "not " not in text and "!=" not in text and len(copy.body) == 3, text
        binding = next(line for line in text.splitlines() if "expected =" in line)
        assert binding not in BOUND_TESTS, text
        assert "combine" not in text or ('"cm"' in binding and '"any"' in binding), text
    _as_declared(tmp_path, planting)
