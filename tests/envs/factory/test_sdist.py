"""Package specs, sdist download from a local index, layout detection, test dependencies, statements."""

from __future__ import annotations

from pathlib import Path

import pytest

from envfarm.envs.code_repair.factory import deps, discover, sdist, statement
from envfarm.envs.code_repair.factory.recipe import load_recipe
from envfarm.errors import ConfigError, PackageNotFound, TaskFactoryError

from .tinyproject import FILES, NAME, VERSION, write_sdist


@pytest.mark.parametrize("bad", ["attrs", "attrs>=1", "attrs==", "==1.0", "a b==1", ""])
def test_bad_package_spec_says_what_to_write(bad: str) -> None:
    with pytest.raises(ConfigError, match="NAME==VERSION"):
        sdist.parse_spec(bad)


def test_spec_name_is_normalized() -> None:
    assert str(sdist.parse_spec(" Python_Slugify == 8.0.4 ")) == "python-slugify==8.0.4"


def test_download_unpack_layout_from_a_local_index(tmp_path: Path) -> None:
    write_sdist(tmp_path / "index")
    spec = sdist.parse_spec(f"{NAME}=={VERSION}")
    sd = sdist.download(spec, tmp_path / "cache", [tmp_path / "index"])
    assert sd.path.parent == tmp_path / "cache" and len(sd.sha256) == 64
    again = sdist.download(spec, tmp_path / "cache", [tmp_path / "nowhere"])  # cached: no pip call
    assert again == sd
    files = sdist.unpack(sd)
    assert set(FILES) <= set(files) and "PKG-INFO" in files
    layout = discover.find_layout(files, load_recipe(NAME), spec)
    assert layout.source_files == ("tinycalc/__init__.py", "tinycalc/clamp.py", "tinycalc/stats.py")
    assert layout.test_paths == ("tests",) and layout.pythonpath == "."


def test_unknown_package_is_package_not_found(tmp_path: Path) -> None:
    write_sdist(tmp_path / "index")
    with pytest.raises(PackageNotFound, match=r"no source distribution of envfarm-nosuch==1\.0"):
        sdist.download(sdist.parse_spec("envfarm-nosuch==1.0"), tmp_path / "cache", [tmp_path / "index"])


def test_sdist_without_tests_is_refused() -> None:
    files = {k: v.encode() for k, v in FILES.items() if not k.startswith("tests/")}
    spec = sdist.parse_spec(f"{NAME}=={VERSION}")
    with pytest.raises(TaskFactoryError, match="ships no tests"):
        discover.find_layout(files, load_recipe(NAME), spec)


def test_src_layout_and_recipe_skip() -> None:
    files = {"src/pkg/__init__.py": b"", "src/pkg/core.py": b"x = 1\n", "setup.py": b"", "docs/conf.py": b"",
             "tests/test_core.py": b"def test_x():\n    pass\n"}
    layout = discover.find_layout(files, load_recipe("whatever"), sdist.parse_spec("whatever==1"))
    assert layout.source_files == ("src/pkg/__init__.py", "src/pkg/core.py") and layout.pythonpath == "src"


def test_test_requirements_from_metadata_groups_and_recipe() -> None:
    pkg_info = (b"Metadata-Version: 2.1\nName: demo\nVersion: 1\nRequires-Dist: six>=1\n"
                b'Requires-Dist: hypothesis; extra == "tests"\nRequires-Dist: sphinx; extra == "docs"\n'
                b'Requires-Dist: mypy; extra == "tests"\n'
                b'Requires-Dist: tomli; python_version < "3.11"\n')
    pyproject = b'[dependency-groups]\ntest = ["pympler", {include-group = "x"}]\n'
    reqs = deps.test_requirements({"PKG-INFO": pkg_info, "pyproject.toml": pyproject}, load_recipe("demo"),
                                  "3.11")
    assert reqs == ("hypothesis", "pympler", "pytest==9.2.0", "six>=1")


def test_statement_quotes_failures_but_not_the_changed_file() -> None:
    log = (
        "____ test_below ____\n"
        "tests/test_clamp.py:8: in test_below\n    assert clamp(-3, 0, 10) == 0\n"
        "tinycalc/clamp.py:3: in clamp\n    return lo + 1\n"
        "E   assert 1 == 0\nE    +  where 1 = clamp(-3, 0, 10)\n"
        "E   see tinycalc/clamp.py line 3 at 0x7f00deadbeef\n"
        "==== short test summary info ====\nFAILED tests/test_clamp.py::test_below\n"
    )
    text = statement.problem_statement("tinycalc", ["tests/test_clamp.py::test_below"], 3, log,
                                       "tinycalc/clamp.py")
    assert "`tests/test_clamp.py::test_below`" in text and "E   assert 1 == 0" in text
    assert "clamp.py" not in text.replace("test_clamp.py", "") and "lo + 1" not in text
    assert "3 other tests" in text
