"""The coverage map on coverage.py's own data files (written with its API, no sandbox): which test files run
which lines, lines run at import, files no test reaches, and the timeouts scaled to the chosen files."""

from __future__ import annotations

from pathlib import Path

import coverage
import pytest

from envfarm.envs.code_repair.factory.covmap import IMPORT, CoverageMap, from_data, mutation_lines

ROOT = "/workspace/testbed"
LOG = """\
============================= slowest durations ==============================
2.50s call     tests/test_a.py::test_one
0.50s setup    tests/test_b.py::test_two[a b]
0.25s call     tests/test_b.py::test_two[a b]
0.01s teardown tests/test_a.py::test_one
PASSED tests/test_a.py::test_one
"""


def write_data(path: Path) -> Path:
    data = coverage.CoverageData(basename=str(path))
    data.set_context("")  # import and collection
    data.add_lines({f"{ROOT}/pkg/m.py": [1, 5], f"{ROOT}/pkg/imported.py": [1]})
    data.set_context("tests/test_a.py::test_one|run")
    data.add_lines({f"{ROOT}/pkg/m.py": [2, 3], "/usr/lib/python3/dist-packages/x.py": [1]})
    data.set_context("tests/test_b.py::test_two[a b]|setup")
    data.add_lines({"/testbed/pkg/m.py": [3]})  # the /testbed link resolves to the same tree
    data.set_context("tests/test_failing.py::test_bad|run")
    data.add_lines({f"{ROOT}/pkg/m.py": [7]})
    data.write()
    return path


@pytest.fixture
def cov(tmp_path: Path) -> CoverageMap:
    found = from_data(write_data(tmp_path / "cov.data"), LOG, 10.0, ["pkg/m.py", "pkg/imported.py",
                                                                     "pkg/untested.py"],
                      ["tests/test_a.py", "tests/test_b.py"])
    assert found is not None
    return found


def test_lines_map_to_the_passing_test_files_that_run_them(cov: CoverageMap) -> None:
    assert cov.select("pkg/m.py", [2]) == ("tests/test_a.py",)
    assert cov.select("pkg/m.py", [3]) == ("tests/test_a.py", "tests/test_b.py")
    assert cov.select("pkg/m.py", [2, 4]) == ("tests/test_a.py",)  # line 4 ran nowhere


def test_lines_run_at_import_are_left_to_the_name_heuristic(cov: CoverageMap) -> None:
    assert cov.select("pkg/m.py", [1]) is None and cov.select("pkg/m.py", [2, 5]) is None
    assert cov.lines["pkg/imported.py"] == {1: (IMPORT,)}


def test_lines_no_passing_test_runs_select_nothing(cov: CoverageMap) -> None:
    assert cov.select("pkg/m.py", [4]) == ()
    assert cov.select("pkg/m.py", [7]) == ()  # only a test that fails on the clean code runs it
    assert cov.select("pkg/untested.py", [1]) == ()  # never imported
    assert "dist-packages" not in str(cov.lines)  # files outside the project are not kept


def test_timeouts_scale_with_the_chosen_files(cov: CoverageMap) -> None:
    assert cov.durations == {"tests/test_a.py": 2.51, "tests/test_b.py": 0.75}
    assert cov.overhead_s == pytest.approx(10.0 - 3.26)
    assert cov.timeout_s(["tests/test_b.py"], floor=10.0, ceiling=400.0) == pytest.approx(4 * (6.74 + 0.75))
    assert cov.timeout_s(["tests/test_b.py"], floor=50.0, ceiling=400.0) == 50.0
    assert cov.timeout_s(["tests/test_a.py"], floor=1.0, ceiling=20.0) == 20.0


def test_the_map_survives_its_json_form(cov: CoverageMap) -> None:
    assert CoverageMap.from_json(cov.to_json()) == cov


def test_no_source_file_measured_is_no_map(tmp_path: Path) -> None:
    data = write_data(tmp_path / "cov.data")
    assert from_data(data, LOG, 10.0, ["other/mod.py"], ["tests/test_a.py"]) is None


def test_an_edit_counts_its_lines_and_its_statements_first_line() -> None:
    source = b"def f(x):\n    y = g(x,\n          2)\n    return y\n"
    start = source.index(b"2)")
    assert mutation_lines(source, start, start + 1, 3) == (2, 3)  # continuation line -> the statement's
    start = source.index(b"return y")
    assert mutation_lines(source, start, start + len(b"return y"), 4) == (4,)
    start = source.index(b"g(x,")
    assert mutation_lines(source, start, source.index(b")\n") + 1, 2) == (2, 3)
