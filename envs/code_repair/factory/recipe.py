"""Per-project recipes for the task factory: ``recipes.toml`` beside this file, overridable per run.

    recipe = load_recipe("attrs")       # Recipe(packages=(), ignore=("tests/test_mypy.yml", ...), ...)

A recipe says only what cannot be read from the sdist: extra test dependencies, dependencies never to
install (linters, type checkers), tests to leave out, source files not to mutate. Everything else is
derived (``deps.py``, ``sdist.py``).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from envfarm.errors import ConfigError

RECIPES_FILE = Path(__file__).with_name("recipes.toml")


class RecipeTable(BaseModel):
    """One ``[packages."name"]`` table (or ``[defaults]``); unset fields inherit the defaults."""

    model_config = ConfigDict(extra="forbid")

    pytest: str | None = None
    """The pytest requirement added when the project's own test requirements name no pytest."""
    packages: list[str] | None = None
    """Extra pip requirement lines for the test environment."""
    drop: list[str] | None = None
    """Requirement names never installed (added to the defaults' list)."""
    tests: list[str] | None = None
    """Test folders or files (default: ``tests/`` or ``test/``)."""
    ignore: list[str] | None = None
    """Paths passed to pytest as ``--ignore=PATH``."""
    pytest_args: list[str] | None = None
    """Extra pytest arguments."""
    source: list[str] | None = None
    """Package folders or modules to mutate (default: every import package of the sdist)."""
    skip_source: list[str] | None = None
    """Globs (fnmatch, on repository paths) of source files never mutated."""
    timeout_s: float | None = None
    """Per-mutant test timeout; default 4x the baseline suite time, at least ``min_timeout_s``."""
    min_timeout_s: float | None = None
    """Floor of the derived per-mutant timeout."""
    env: dict[str, str] | None = None
    """Environment variables the suite needs (names: letters, digits, underscores)."""


class RecipesFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    defaults: RecipeTable = RecipeTable()
    packages: dict[str, RecipeTable] = {}

    def own(self, name: str) -> RecipeTable | None:
        """Package ``name``'s own table (any spelling of the name), None when it has none."""
        return self.packages.get(normalize(name))


@dataclass(frozen=True)
class Recipe:
    """The resolved recipe of one project."""

    pytest: str
    packages: tuple[str, ...]
    drop: frozenset[str]
    tests: tuple[str, ...]
    ignore: tuple[str, ...]
    pytest_args: tuple[str, ...]
    source: tuple[str, ...]
    skip_source: tuple[str, ...]
    timeout_s: float | None
    min_timeout_s: float
    env: tuple[tuple[str, str], ...] = ()


def in_recipe_file(name: str) -> str:
    """Where a fix for project ``name`` goes, as error messages name it."""
    return f'under [packages."{name}"] in the recipe file'


def normalize(name: str) -> str:
    """PEP 503 name normalization: ``Python_Slugify`` -> ``python-slugify``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_recipes(path: Path = RECIPES_FILE) -> RecipesFile:
    try:
        return RecipesFile.model_validate(tomllib.loads(path.read_text(encoding="utf-8")))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"cannot read the recipe file {path}: {e}") from e
    except ValidationError as e:
        raise ConfigError(f"recipe file {path} is invalid:\n{e}") from e


def load_recipe(name: str, path: Path = RECIPES_FILE) -> Recipe:
    """The recipe of package ``name``: its table over the defaults."""
    data = read_recipes(path)
    base = data.defaults
    own = data.own(name) or RecipeTable()
    return Recipe(
        pytest=own.pytest or base.pytest or "pytest",
        packages=tuple((base.packages or []) + (own.packages or [])),
        drop=frozenset(normalize(d) for d in (base.drop or []) + (own.drop or [])),
        tests=tuple(own.tests or base.tests or ()),
        ignore=tuple((base.ignore or []) + (own.ignore or [])),
        pytest_args=tuple((base.pytest_args or []) + (own.pytest_args or [])),
        source=tuple(own.source or ()),
        skip_source=tuple((base.skip_source or []) + (own.skip_source or [])),
        timeout_s=own.timeout_s or base.timeout_s,
        min_timeout_s=own.min_timeout_s or base.min_timeout_s or 10.0,
        env=_variables(name, {**(base.env or {}), **(own.env or {})}),
    )


def _variables(name: str, env: dict[str, str]) -> tuple[tuple[str, str], ...]:
    bad = [k for k in env if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k) or k in ("PYTHONPATH",)]
    if bad:
        raise ConfigError(f"recipe of {name}: env names {bad} are not plain variable names (PYTHONPATH is "
                          "the factory's own)")
    return tuple(sorted(env.items()))
