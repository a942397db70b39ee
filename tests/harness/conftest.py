"""Fixtures for the harness tests: SWE-bench Lite rows, the toy repository and its spec."""

from __future__ import annotations

from pathlib import Path

import pytest

from envfarm.harness import Instance, load_instances
from envfarm.harness.instances import instance_from_row
from envfarm.testing.toyrepo import LITE, make_repo, row, write_spec


@pytest.fixture(scope="session")
def lite_parquet() -> Path:
    """The SWE-bench Lite test split in ../shared. Missing is a failure, not a skip: the project ships it
    beside every checkout (CI included), so a skip would only hide a broken layout."""
    path = LITE / "test.parquet"
    assert path.is_file(), f"SWE-bench Lite is not at {path}; it comes with shared/ beside the checkout"
    return path


@pytest.fixture(scope="session")
def lite(lite_parquet: Path) -> list[Instance]:
    """The 300 SWE-bench Lite test rows (v5 schema)."""
    return load_instances(lite_parquet)


@pytest.fixture(scope="session")
def toy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    """(repo source folder, base commit, specs folder) of the toy repository."""
    root = tmp_path_factory.mktemp("toy")
    _, base = make_repo(root / "src")
    specs = root / "specs"
    write_spec(specs)
    return root / "src", base, specs


@pytest.fixture(scope="session")
def toy_instance(toy: tuple[Path, str, Path]) -> Instance:
    return instance_from_row(row("envfarm-tests__calc-1", toy[1]))
