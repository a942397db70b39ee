"""Test discovery that follows the project: in-package tests, testpaths/python_files, unittest, doctests."""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest

from envfarm.envs.code_repair.factory import deps, prepare
from envfarm.envs.code_repair.factory.discover import Layout, find_layout, read_pytest_config
from envfarm.envs.code_repair.factory.recipe import load_recipe
from envfarm.envs.code_repair.factory.sdist import parse_spec
from envfarm.errors import TaskFactoryError

TEST = b"def test_it():\n    assert True\n"
SPEC = parse_spec("demo==1.0")


def layout(files: dict[str, bytes]) -> Layout:
    return find_layout(files, load_recipe("demo"), SPEC)


def test_tests_inside_the_package_toolz_layout() -> None:
    found = layout({"toolz/__init__.py": b"", "toolz/itertoolz.py": b"x = 1\n", "setup.py": b"",
                    "toolz/tests/__init__.py": b"", "toolz/tests/test_itertoolz.py": TEST})
    assert found.origin == "in-package" and found.test_paths == ("toolz/tests",)
    assert found.test_files == ("toolz/tests/test_itertoolz.py",) and found.in_package
    assert found.source_files == ("toolz/__init__.py", "toolz/itertoolz.py")  # tests are never mutated


def test_nested_in_package_test_folders_networkx_layout() -> None:
    found = layout({"nx/__init__.py": b"", "nx/algorithms/__init__.py": b"",
                    "nx/algorithms/flow.py": b"x = 1\n", "nx/algorithms/tests/test_flow.py": TEST,
                    "nx/tests/test_graph.py": TEST,
                    "nx/tests/deep/tests/test_more.py": TEST, "nx/graph.py": b"y = 2\n"})
    assert found.test_paths == ("nx/algorithms/tests", "nx/tests")  # outermost test folders only
    assert found.test_files == ("nx/algorithms/tests/test_flow.py", "nx/tests/deep/tests/test_more.py",
                                "nx/tests/test_graph.py")
    assert found.source_files == ("nx/__init__.py", "nx/algorithms/__init__.py", "nx/algorithms/flow.py",
                                  "nx/graph.py")


def test_test_folders_by_other_names_pint_layout() -> None:
    found = layout({"pint/__init__.py": b"", "pint/registry.py": b"x = 1\n", "pint/testing.py": b"y = 2\n",
                    "pint/testsuite/__init__.py": b"", "pint/testsuite/helpers.py": b"z = 3\n",
                    "pint/testsuite/test_registry.py": TEST, "pint/util/__init__.py": b"",
                    "pint/util/unit_tests/cases/test_deep.py": TEST})
    assert found.origin == "in-package" and found.in_package
    assert found.test_paths == ("pint/testsuite", "pint/util/unit_tests")
    assert found.test_files == ("pint/testsuite/test_registry.py", "pint/util/unit_tests/cases/test_deep.py")
    # the suite's helpers are not code to mutate; a module merely named testing is
    assert found.source_files == ("pint/__init__.py", "pint/registry.py", "pint/testing.py",
                                  "pint/util/__init__.py")


def test_testpaths_naming_the_package_itself_mpmath_layout() -> None:
    pyproject = b"[tool.pytest.ini_options]\ntestpaths = ['mpmath', 'docs']\n"
    found = layout({"pyproject.toml": pyproject, "mpmath/__init__.py": b"", "mpmath/ctx.py": b"x = 1\n",
                    "mpmath/libmp/__init__.py": b"", "mpmath/libmp/gammazeta.py": b"y = 2\n",
                    "mpmath/tests/__init__.py": b"", "mpmath/tests/test_ctx.py": TEST})
    assert found.origin == "testpaths (pyproject.toml)" and found.test_files == ("mpmath/tests/test_ctx.py",)
    assert found.source_files == ("mpmath/__init__.py", "mpmath/ctx.py", "mpmath/libmp/__init__.py",
                                  "mpmath/libmp/gammazeta.py")  # the package is code, its tests/ are not


def test_a_test_framework_inside_the_package_is_no_suite() -> None:
    """absl-py ships absl/testing (its test framework: TestCase subclasses, no tests) and no test suite."""
    framework = b"import unittest\n\nclass TestCase(unittest.TestCase):\n    maxDiff = None\n"
    with pytest.raises(TaskFactoryError, match="the sdist ships no tests"):
        layout({"absl/__init__.py": b"", "absl/app.py": b"x = 1\n", "absl/testing/__init__.py": b"",
                "absl/testing/absltest.py": framework, "absl/testing/parameterized.py": b"y = 2\n"})


def test_testpaths_and_python_files_from_pyproject() -> None:
    pyproject = b'[tool.pytest.ini_options]\ntestpaths = ["checks"]\npython_files = ["check_*.py"]\n'
    found = layout({"pyproject.toml": pyproject, "pkg/__init__.py": b"x = 1\n", "checks/check_a.py": TEST,
                    "checks/test_ignored.py": TEST, "tests/test_other.py": TEST})
    assert found.origin == "testpaths (pyproject.toml)" and found.test_paths == ("checks",)
    assert found.test_files == ("checks/check_a.py",)  # python_files, not pytest's default


@pytest.mark.parametrize(("name", "text", "origin"), [
    ("setup.cfg", "[tool:pytest]\ntestpaths = src/pkg/tests\naddopts = --cov\n", "testpaths (setup.cfg)"),
    ("tox.ini", "[tox]\nenvlist = py3\n\n[pytest]\ntestpaths =\n    src/pkg/tests\n", "testpaths (tox.ini)"),
    ("pytest.ini", "[pytest]\ntestpaths = src/pkg/tests\n", "testpaths (pytest.ini)"),
])
def test_testpaths_from_ini_files(name: str, text: str, origin: str) -> None:
    found = layout({name: text.encode(), "src/pkg/__init__.py": b"x = 1\n", "src/pkg/tests/test_a.py": TEST,
                    "tests/test_b.py": TEST})
    assert found.origin == origin and found.test_paths == ("src/pkg/tests",) and found.pythonpath == "src"
    assert found.source_files == ("src/pkg/__init__.py",)


def test_pytest_ini_wins_over_setup_cfg_like_pytest() -> None:
    files = {"pytest.ini": b"[pytest]\ntestpaths = a\n", "setup.cfg": b"[tool:pytest]\ntestpaths = b\n"}
    assert read_pytest_config(files).file == "pytest.ini" and read_pytest_config(files).testpaths == ("a",)
    assert read_pytest_config({"setup.cfg": b"[metadata]\nname = x\n"}).file == ""


def test_unittest_module_outside_python_files_is_passed_by_name() -> None:
    suite = b"import unittest\n\n\nclass Check(unittest.TestCase):\n    def runTest(self):\n        pass\n"
    found = layout({"pkg/__init__.py": b"x = 1\n", "tests/tests.py": suite, "tests/helpers.py": b"y = 1\n"})
    assert found.test_files == ("tests/tests.py",)
    assert found.test_paths == ("tests", "tests/tests.py")  # pytest would not collect it from the folder


def test_doctest_only_modules_are_skipped_with_a_reason() -> None:
    doc = b'def f():\n    """\n    >>> f()\n    1\n    """\n    return 1\n'
    found = layout({"pkg/__init__.py": b"x = 1\n", "tests/test_doc.py": doc, "tests/test_real.py": TEST})
    assert found.test_files == ("tests/test_real.py",)
    assert found.skipped == (("tests/test_doc.py", found.skipped[0][1]),) and "doctest" in found.skipped[0][1]
    with pytest.raises(TaskFactoryError, match="doctest-only suite"):
        layout({"pkg/__init__.py": b"x = 1\n", "tests/test_doc.py": doc})
    with pytest.raises(TaskFactoryError, match="doctest-only suite"):
        layout({"pkg/__init__.py": b"x = 1\n", "setup.cfg": b"[tool:pytest]\naddopts = --doctest-modules\n"})
    with pytest.raises(TaskFactoryError, match="ships no tests"):
        layout({"pkg/__init__.py": b"x = 1\n", "README.md": b"hi"})


def test_command_keeps_plugins_and_import_mode_but_not_coverage() -> None:
    cfg = b"[tool:pytest]\naddopts = --cov=pkg -p pytester --import-mode=importlib --doctest-modules -n 4\n"
    found = layout({"setup.cfg": cfg, "pkg/__init__.py": b"x = 1\n", "tests/test_a.py": TEST})
    assert found.config.kept_addopts == ("-p", "pytester", "--import-mode=importlib")
    assert found.config.doctests
    cmd = prepare.test_command(load_recipe("demo"), found)
    assert cmd.endswith("--tb=short -p pytester --import-mode=importlib") and "--cov" not in cmd


def test_no_passing_tests_names_the_fix_the_log_points_at() -> None:
    internals = ("ERROR tests/test_views.py::test_basic_view - AttributeError: module "
                 "'_pytest.monkeypatch' has")
    assert 'packages = ["pytest<X"] under [packages."flask"]' in prepare.no_passing_fix(internals, "flask")
    missing = "E   ModuleNotFoundError: No module named 'yaml'"
    assert prepare.no_passing_fix(missing, "demo").startswith("add the missing test dependencies")


def test_a_baseline_timeout_after_the_last_test_names_deselecting() -> None:
    ended = "........................................................................ [ 99%]\n" \
            "....................                                                     [100%]\n"
    assert '"--deselect", "FILE::TEST"' in prepare.baseline_timeout_fix(ended, "packaging")
    hung = "...................                                                      [ 37%]\n"
    assert prepare.baseline_timeout_fix(hung, "demo").startswith("leave the hanging test files out")


def test_dependencies_inferred_from_the_suite() -> None:
    tests = (b"import yaml\nimport json\nimport pkg\nfrom helpers import x\ntry:\n    import numpy\n"
             b"except ImportError:\n    numpy = None\n\n\ndef test_a(mocker):\n    pass\n")
    files = {"pyproject.toml": b'[tool.pytest.ini_options]\nasyncio_mode = "auto"\n', "pkg/__init__.py":
             b"from importlib.metadata import version\n__version__ = version('demo')\n",
             "tests/test_a.py": tests, "tests/helpers.py": b"x = 1\n",
             "PKG-INFO": b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\nRequires-Dist: six\n"}
    found = deps.dependencies(files, load_recipe("demo"), "3.11", layout(files))
    origins = {d.requirement: d.origin for d in found}
    assert origins["six"] == "PKG-INFO" and origins["pytest==9.2.0"] == "default"
    assert origins["PyYAML"] == "inferred: imported by tests/test_a.py"
    assert origins["pytest-asyncio"] == "inferred: pytest config (pyproject.toml)"
    assert origins["pytest-mock"].startswith("inferred: the mocker fixture")
    assert origins["demo==1.0"].startswith("inferred: pkg/__init__.py reads")
    assert not {"numpy", "json", "pkg", "helpers"} & set(origins)  # optional, stdlib, local
    declared = deps.test_requirements(files, load_recipe("demo"), "3.11", layout(files), infer=False)
    assert "PyYAML" not in declared and "six" in declared
    pinned = replace(load_recipe("demo"), packages=("six<1.16", "pytest<9.1"))  # a recipe's pin wins
    origins = {d.requirement: d.origin for d in deps.dependencies(files, pinned, "3.11", layout(files))}
    assert origins["six<1.16"] == origins["pytest<9.1"] == "recipe"
    assert "six" not in origins and "pytest==9.2.0" not in origins


def test_recipes_check_prints_what_was_inferred(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from envfarm.cli import app

    from .tinyproject import NAME, VERSION, write_sdist

    monkeypatch.setenv("ENVFARM_HOME", str(tmp_path / "home"))
    write_sdist(tmp_path / "index")
    args = ["tasks", "recipes", "--check", f"{NAME}=={VERSION}", "--find-links", str(tmp_path / "index")]
    res = CliRunner().invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    (found,) = json.loads(res.output)
    assert found["test_paths"] == ["tests"] and found["origin"] == "tests/" and not found["in_package"]
    assert found["test_files"] == ["tests/test_clamp.py", "tests/test_stats.py"] and found["overrides"] == []
    assert found["test_cmd"].startswith("python -m pytest -rA") and found["source_files"] == 3
    assert {"requirement": "pytest", "origin": "PKG-INFO"} in found["dependencies"]
    text = CliRunner().invoke(app, args).output
    assert "test files:   2: tests/test_clamp.py, tests/test_stats.py" in text
    assert "overrides:    none" in text
    listing = CliRunner().invoke(app, ["tasks", "recipes"]).output
    assert "attrs:" in listing and "every other project: inferred" in listing


def test_recipe_env_reaches_the_spec_and_rows(tmp_path: Path) -> None:
    from envfarm.envs.code_repair.factory.repo import EnvRecipe, Project, spec_text
    from envfarm.errors import ConfigError

    table = tmp_path / "recipes.toml"
    table.write_text('[packages.demo]\nenv = { DEMO_TESTING = "1" }\n')
    recipe = load_recipe("demo", table)
    assert recipe.env == (("DEMO_TESTING", "1"),) and load_recipe("other", table).env == ()
    env = EnvRecipe(("pytest",), "python -m pytest", ".", 600.0, recipe.env)
    assert 'env = { PYTHONDONTWRITEBYTECODE = "1", PYTHONPATH = ".", DEMO_TESTING = "1" }' in spec_text(
        Project(SPEC, "demo-1.0.tar.gz", "0" * 64, {}, env))
    assert EnvRecipe.from_json(env.to_json()) == env
    plain = EnvRecipe(("pytest",), "python -m pytest", ".", 600.0)
    assert "variables" not in plain.to_json()  # rows without variables read as before
    table.write_text('[packages.demo]\nenv = { PYTHONPATH = "x" }\n')
    with pytest.raises(ConfigError, match="not plain variable names"):
        load_recipe("demo", table)
    # the baseline (and the mutant outcomes cached under it) is redone when a recipe sets a variable
    stamp = functools.partial(prepare.baseline_stamp, "0" * 64, "img:1", "python -m pytest", ("tests",))
    assert stamp(()) == hashlib.sha256("\0".join(["0" * 64, "img:1", "python -m pytest", "tests"])
                                       .encode()).hexdigest()[:16]  # no variable: stamps kept from before
    assert len({stamp(()), stamp(recipe.env), stamp((("DEMO_TESTING", "2"),))}) == 3
