"""What the grader knows of a row whose test_patch adds a whole test module (for the planting tests)."""

from __future__ import annotations

from envfarm.harness import canary


def known_new(module: str, text: str, failing: list[str]) -> canary.Known:
    """A row whose test_patch adds ``module`` with every line of ``text``; ``failing``: its FAIL_TO_PASS
    tests (function names)."""
    patch = f"--- /dev/null\n+++ b/{module}\n" + "".join(f"+{x}\n" for x in text.splitlines())
    return canary.known_for([f"{module}::{name}" for name in failing], [], patch)


ENUM_TESTS = '''\
import enum


class Exit(enum.IntEnum):
    OK = 0
    FAILED = 1
    USAGE = 4
    INTERNAL = 3


def run(ok):
    return Exit.OK if ok else Exit.FAILED


def test_codes_differ():
    assert len({Exit.OK, Exit.FAILED, Exit.USAGE, Exit.INTERNAL}) == 4


def test_run_ok():
    result = run(True)
    assert result == Exit.OK


def test_run_fails():
    assert run(False) == Exit.FAILED
'''
"""Tests whose expected values are enum members (pytest's ``result.ret == ExitCode.OK``)."""


RAW_TESTS = r'''
def latex(name, sub):
    return "\\left(%s\\right)_{%s}" % (name, sub)


def test_subscript():
    assert latex("A", "0") == r"\left(A\right)_{0}"


def test_sum_subscript():
    assert latex("-B + A", "0, 0") == r"\left(-B + A\right)_{0, 0}"
'''.lstrip()
"""Tests whose expected values are raw strings with backslashes (LaTeX, as sympy's printing tests have)."""


BOUND_TESTS = '''\
import numpy as np


class Dataset:
    """Equal when variables (dimensions, data) and coordinates are: attributes ignored, as in xarray's
    assert_equal."""

    def __init__(self, data_vars, coords=None, attrs=None):
        self.data_vars, self.coords, self.attrs = data_vars, coords or {}, attrs or {}

    def __eq__(self, other):
        def shape(d):
            return {k: v[:2] if isinstance(v, tuple) else v for k, v in d.items()}

        return shape(self.data_vars) == shape(other.data_vars) and self.coords == other.coords


def assert_equal(a, b):
    assert a == b


def combine(parts):
    data = [x for part in parts for x in part]
    return Dataset({"v": ("x", data, {"units": "m"})}, {"x": [0, 1, 2]}, attrs={"units": "m"})


def test_combine():
    actual = combine([[4, 5], [6]])
    expected = Dataset({"v": ("x", [4, 5, 6], {"units": "cm"})}, {"x": [0, 1, 2]}, attrs={"note": "any"})
    assert_equal(expected, actual)


def test_cumsum():
    expected = np.array([1, 2, 3])
    actual = np.cumsum([1, 1, 1])
    np.testing.assert_array_equal(actual, expected)
'''
"""Tests whose expected value is bound to a local name, then compared (xarray's ``expected = Dataset(...)``,
``assert_equal(expected, actual)``), with attributes the comparison ignores."""
