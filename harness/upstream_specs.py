"""Environment specs derived for repos that have no spec file in ``images/swebench/`` (or ``--specs``).

SWE-bench keeps a per-repo/version table of environments (``MAP_REPO_VERSION_TO_SPECS``: python, pip
packages, install command). swebench 2.x-4.x export it from ``swebench.harness.constants``; swebench 5.0.2,
the version envfarm grades with, no longer ships it (v5 rows name a prebuilt ``image`` instead). So:

1. if the installed swebench has the table, the repo/version's entry is translated (``python``,
   ``pip_packages``, ``install``, the ``sed`` lines of ``pre_install``);
2. otherwise :data:`FACTS`, envfarm's own summary of that table for the SWE-bench repos, gives the Python and
   the install command (for every SWE-bench Lite row its install command is the one in the row's v5
   ``eval_script``; ``tests/harness/test_upstream_specs.py`` checks that).

The test command and test files are never taken from here: :func:`specs.make_plan` derives them from the row.

Python comes from the Debian suite a base image is made of (:data:`SUITES`, one ``images/base*/recipe.toml``
each): :func:`suite_for` picks the suite shipping the Python asked for, else the nearest one (SWE-bench runs
Django 3.x on 3.6: bullseye's 3.9) with a note in the plan. Spec files choose the same way (``specs.py``), and
the env image builds FROM that suite's base image, built on demand. Planning never fails for a repo that is
known here.

Translation to envfarm's offline model: ``install`` commands run in the instance image with
``PIP_NO_INDEX=1`` and ``PIP_FIND_LINKS`` set to the env image's wheelhouse, so they resolve dependencies
from the wheelhouse only; ``--no-build-isolation`` is added so the build backend comes from the env image
(``packages`` always carries setuptools and wheel). apt-get/wget steps of ``pre_install`` are dropped (no
network in builds) and listed in the note.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import _swebench
from .env_spec import EnvSpec

SUITES: tuple[tuple[str, str], ...] = (("bullseye", "3.9"), ("bookworm", "3.11"), ("trixie", "3.13"))
"""Debian suites a base image can be made of, with the python3 each ships (images/base/recipe.toml is
bookworm, images/base-bullseye/ and images/base-trixie/ the others; a test checks the two agree)."""
BUILD_TOOLS = ("setuptools", "wheel")
PIP_INSTALL = "python -m pip install"
SOURCE = Path(__file__)
REQUIREMENTS = 'for f in requirements*.txt; do [ -f "$f" ] && python -m pip install -r "$f"; done; true'
"""Upstream ``packages = "requirements.txt"``: the repo's requirements, installed from the wheelhouse."""


@dataclass(frozen=True)
class RepoFacts:
    """What envfarm knows of one SWE-bench repo without swebench's table."""

    python: str
    """Python of the newest versions."""
    older: tuple[tuple[str, str], ...] = ()
    """(last version, python) pairs, oldest first: versions up to and including ``last`` use ``python``."""
    install: str = f"{PIP_INSTALL} -e ."
    tools: tuple[str, ...] = ("pytest",)
    """Test-runner packages the row's test command needs."""

    def python_for(self, version: str) -> str:
        key = _version_key(version)
        return next((py for last, py in self.older if key <= _version_key(last)), self.python)


FACTS: dict[str, RepoFacts] = {
    "astropy/astropy": RepoFacts(
        "3.10", (("1.3", "3.6"), ("5.2", "3.9")), f"{PIP_INSTALL} -e .[test] --verbose"
    ),
    "django/django": RepoFacts(
        "3.11", (("2.2", "3.5"), ("3.2", "3.6"), ("4.0", "3.8"), ("4.2", "3.9")), tools=()
    ),
    "matplotlib/matplotlib": RepoFacts("3.11", (("2.2", "3.5"), ("3.0", "3.7"), ("3.4", "3.8"))),
    "mwaskom/seaborn": RepoFacts("3.9", install=f"{PIP_INSTALL} -e .[dev]"),
    "pallets/flask": RepoFacts("3.11", (("2.0", "3.9"), ("2.1", "3.10"))),
    "psf/requests": RepoFacts("3.9", install=f"{PIP_INSTALL} ."),
    "pydata/xarray": RepoFacts("3.10"),
    "pylint-dev/pylint": RepoFacts("3.9"),
    "pytest-dev/pytest": RepoFacts("3.9", tools=()),
    "scikit-learn/scikit-learn": RepoFacts(
        "3.9", (("0.22", "3.6"),), f"{PIP_INSTALL} -v --no-use-pep517 --no-build-isolation -e ."
    ),
    "sphinx-doc/sphinx": RepoFacts(
        "3.10", (("7.4", "3.9"),), f"{PIP_INSTALL} -e .[test]", ("tox", "tox-current-env")
    ),
    "sympy/sympy": RepoFacts("3.9", tools=("mpmath",)),
    # SWE-bench (full) repos beyond Lite
    "dbt-labs/dbt-core": RepoFacts("3.9"),
    "marshmallow-code/marshmallow": RepoFacts("3.9", install=f"{PIP_INSTALL} -e '.[dev]'"),
    "pvlib/pvlib-python": RepoFacts("3.9", install=f"{PIP_INSTALL} -e .[all]"),
    "pydicom/pydicom": RepoFacts("3.11", (("1.3", "3.6"), ("2.0", "3.8"), ("2.2", "3.9"), ("2.3", "3.10"))),
    "pylint-dev/astroid": RepoFacts("3.9"),
    "pyvista/pyvista": RepoFacts("3.9"),
    "sqlfluff/sqlfluff": RepoFacts("3.9"),
}


@dataclass(frozen=True)
class Suite:
    """The Debian suite chosen for a Python version."""

    name: str
    python: str
    note: str
    """Empty when the suite ships exactly the Python asked for."""


@dataclass(frozen=True)
class DerivedEnvSpec(EnvSpec):
    """An :class:`EnvSpec` derived here; ``python`` is the suite's, ``requires_python`` SWE-bench's."""

    origin: str = ""
    """"swebench <version> MAP_REPO_VERSION_TO_SPECS" or "envfarm FACTS"."""


def suite_for(python: str, asked_by: str = "SWE-bench") -> Suite:
    """The suite shipping ``python``, else the nearest one (ties: the older suite) with a note.

    Older is the safer side of a tie: a repo's old versions use names later Pythons removed (sympy < 1.12
    imports ``collections.Mapping``, gone in 3.10), while a newer Python rarely is what an old pin needs."""
    for name, py in SUITES:
        if py == python:
            return Suite(name, py, "")
    name, py = min(SUITES, key=lambda s: (abs(_minor(s[1]) - _minor(python)), _minor(s[1])))
    note = f"{asked_by} runs it on Python {python}, which no Debian suite ships; nearest: {name} ({py})"
    return Suite(name, py, note)


def derive(repo: str, version: str) -> DerivedEnvSpec | None:
    """The derived environment of ``repo`` at ``version``, or None when neither source knows the repo."""
    table = upstream_table()
    entry = (table or {}).get(repo, {}).get(version)
    if entry is not None:
        return _from_upstream(repo, version, entry)
    facts = FACTS.get(repo)
    if facts is None:
        return None
    python = facts.python_for(version)
    packages = (*BUILD_TOOLS, *facts.tools)
    return _spec(repo, version, python, packages, (offline_install(facts.install),), (), "envfarm FACTS")


def upstream_table() -> dict[str, dict[str, dict[str, Any]]] | None:
    """swebench's ``MAP_REPO_VERSION_TO_SPECS`` when the installed swebench has it (not 5.0.2)."""
    table = getattr(_swebench.load().constants, "MAP_REPO_VERSION_TO_SPECS", None)
    return table if isinstance(table, dict) else None


def _from_upstream(repo: str, version: str, entry: dict[str, Any]) -> DerivedEnvSpec:
    pip = [str(p) for p in entry.get("pip_packages") or ()]
    conda = str(entry.get("packages") or "")
    if conda and not conda.endswith((".txt", ".yml")):  # a conda package list; pip names are the same
        pip += [p.strip("'\"") for p in conda.split()]
    pre = [str(c) for c in entry.get("pre_install") or ()]
    kept = tuple(c for c in pre if c.lstrip().startswith("sed "))
    dropped = [c.split()[0] for c in pre if c not in kept]
    install = offline_install(str(entry.get("install") or f"{PIP_INSTALL} -e ."))
    steps: tuple[str, ...] = (install,)
    if conda.endswith(".txt"):
        steps = (REQUIREMENTS, install)
    packages = tuple(dict.fromkeys([*BUILD_TOOLS, *pip]))
    sw = _swebench.load()
    origin = f"swebench {sw.version} MAP_REPO_VERSION_TO_SPECS"
    spec = _spec(repo, version, str(entry.get("python", "3.9")), packages, steps, kept, origin)
    if not dropped:
        return spec
    extra = f"pre_install steps needing the network dropped ({', '.join(sorted(set(dropped)))})"
    note = "; ".join(n for n in (spec.note, extra) if n)
    return dataclasses.replace(spec, note=note)


def _spec(
    repo: str,
    version: str,
    python: str,
    packages: tuple[str, ...],
    install: tuple[str, ...],
    pre_install: tuple[str, ...],
    origin: str,
) -> DerivedEnvSpec:
    suite = suite_for(python)
    return DerivedEnvSpec(
        repo=repo,
        version=version,
        python=suite.python,
        packages=packages,
        install=(*pre_install, *install),
        pre_test=(),
        test_cmd=None,
        directives="paths",
        log_parser=None,
        env=(),
        timeout_s=None,
        protected=(),
        source=SOURCE,
        requires_python=python,
        suite=suite.name,
        note=suite.note,
        origin=origin,
    )


def offline_install(command: str) -> str:
    """A pip install command for the offline wheelhouse: the build backend comes from the env image."""
    if not command.startswith(PIP_INSTALL) or "--no-build-isolation" in command:
        return command
    return command.replace(PIP_INSTALL, f"{PIP_INSTALL} --no-build-isolation", 1)


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", version)) or (0,)


def _minor(python: str) -> int:
    key = _version_key(python)
    return key[1] if len(key) > 1 else 0
