"""Canary tests (harness/canary.py): planted code runs with the expected outcomes under real runners, and
the verdict names every way a forged log can miss them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from random import Random

import pytest

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
    a = canary.plant("t.py", MODULE, "function")
    b = canary.plant("t.py", MODULE, "function")
    assert {c.name for c in a.canaries}.isdisjoint({c.name for c in b.canaries}) or a != b
    text = "".join(f"def test_{w1}_{w2}_{n}(): pass\n" for w1 in canary.WORDS for w2 in canary.WORDS
                   for n in range(2, 12))
    planted = canary.plant("t.py", text, "function", Random(1))
    assert all(f"def {c.name}()" not in text for c in planted.canaries)


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
    assert canary.style_for("parse_log_sympy") == canary.style_for("parse_log_pytest") == "function"


@pytest.mark.parametrize("style", ["function", "unittest"])
def test_canary_code_names_a_module_import_like_real_tests(style: str) -> None:
    """A forger that flips only failures of tests naming something beyond builtins (bench/exploits.py's
    *-selective variants) must flip the canaries too."""
    import builtins

    planting = canary.plant("t.py", MODULE, style, Random(3))
    space: dict[str, object] = {}
    exec(compile(planting.text, "t.py", "exec"), space)
    for c in planting.canaries:
        holder = next(v for v in space.values() if hasattr(v, c.name)) if style == "unittest" else None
        fn = getattr(holder, c.name) if holder is not None else space[c.name]
        names = fn.__code__.co_names  # type: ignore[attr-defined]
        assert "os" in names and any(not hasattr(builtins, n) for n in names), names


def test_canaries_never_follow_the_last_test() -> None:
    """sympy's verbose runner prints the file's [OK]/[FAIL] on its last test's line (unparsable there)."""
    text = "import os\n\n\ndef test_a():\n    pass\n\n\ndef test_b():\n    pass\n\n\ndef helper():\n" \
        "    pass\n"
    for seed in range(20):
        planting = canary.plant("t.py", text, "function", Random(seed))
        last = max(planting.text.index(f"def {c.name}(") for c in planting.canaries)
        assert planting.text.index("def test_b():") > last


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
