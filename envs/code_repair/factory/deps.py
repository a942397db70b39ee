"""Test dependencies of an unpacked sdist: what the test environment installs from the host wheelhouse.

Read, in order: the runtime requirements and the ``test``/``tests``/``testing`` extras in ``PKG-INFO``
(markers evaluated for the base image's Python), ``[dependency-groups]`` of the same names in
``pyproject.toml`` (plain strings only), ``requirements-test*.txt`` / ``requirements/test*.txt`` (plain
requirement lines only), then the recipe's ``packages``. Then what the suite shows it needs although the
project declares nothing (``inferred``): the plugins its pytest config names (``asyncio_mode`` ->
pytest-asyncio, ``required_plugins``), the third-party modules its test files import unconditionally
(``yaml`` -> PyYAML), pytest-mock when tests take the ``mocker`` fixture, and the project itself when its
code reads its own version from installed metadata. Names in the recipe's ``drop`` list (linters, type
checkers, coverage) are left out, and the recipe's pytest pin is added when nothing names pytest.

    found = dependencies(files, recipe, "3.11", layout)    # [Dependency(requirement, origin), ...]
"""

from __future__ import annotations

import ast
import email.parser
import logging
import re
import sys
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement

from envfarm.pyast import parse

from .discover import Layout
from .recipe import Recipe, normalize

log = logging.getLogger(__name__)

TEST_EXTRAS = ("test", "tests", "testing")
_REQ_FILE = re.compile(r"^(requirements[-_/])?(test|tests|testing|dev-test)[\w-]*\.(txt|in)$|"
                       r"^requirements[-_](test|tests|testing)[\w-]*\.(txt|in)$")


IMPORT_TO_DIST = {"yaml": "PyYAML", "dateutil": "python-dateutil", "PIL": "Pillow", "bs4": "beautifulsoup4",
                  "attr": "attrs", "OpenSSL": "pyOpenSSL", "jwt": "PyJWT", "dns": "dnspython",
                  "serial": "pyserial", "Crypto": "pycryptodome", "sklearn": "scikit-learn",
                  "_pytest": "pytest",
                  "pytest_asyncio": "pytest-asyncio", "pytest_mock": "pytest-mock", "nose": "nose",
                  "typing_extensions": "typing-extensions", "docutils": "docutils", "markdown": "Markdown",
                  "jinja2": "Jinja2", "markupsafe": "MarkupSafe", "multipart": "python-multipart",
                  "freezegun": "freezegun", "trio": "trio", "anyio": "anyio", "pytz": "pytz",
                  "hypothesis": "hypothesis", "numpy": "numpy", "mock": "mock", "toml": "toml"}
"""Import name -> PyPI name where they differ (or are common enough to be sure of); others: the same."""
_VERSION_READ = re.compile(rb"(importlib[._]metadata|pkg_resources)[\s\S]{0,400}?"
                           rb"\b(version|get_distribution|distribution)\(")


@dataclass(frozen=True)
class Dependency:
    """One requirement of the test environment and where the factory found it."""

    requirement: str
    origin: str
    """``PKG-INFO``, ``dependency-groups``, a requirements file, ``recipe``, ``inferred: ...``, default."""

    @property
    def inferred(self) -> bool:
        return self.origin.startswith("inferred")


def test_requirements(files: Mapping[str, bytes], recipe: Recipe, python: str,
                      layout: Layout | None = None, infer: bool = True) -> tuple[str, ...]:
    """Sorted, deduplicated pip requirement lines for running the project's tests."""
    found = dependencies(files, recipe, python, layout)
    return tuple(sorted((d.requirement for d in found if infer or not d.inferred), key=str.lower))


def dependencies(files: Mapping[str, bytes], recipe: Recipe, python: str,
                 layout: Layout | None = None) -> list[Dependency]:
    """Every requirement with its origin, deduplicated by name (the recipe's line, else the first found wins),
    in found order."""
    env = {**{k: str(v) for k, v in default_environment().items()}, "python_version": python,
           "python_full_version": f"{python}.0"}
    lines: list[tuple[str, str]] = [(r, "recipe") for r in recipe.packages]  # an override wins
    lines += [(r, "PKG-INFO") for r in _pkg_info(files.get("PKG-INFO", b""), env)]
    lines += [(r, "dependency-groups") for r in _dependency_groups(files.get("pyproject.toml", b""))]
    for path in sorted(files):
        if _REQ_FILE.match(path):
            lines += [(r, path) for r in _requirement_lines(files[path].decode("utf-8", errors="replace"))]
    if layout is not None:
        lines += list(inferred(files, layout))
    out: dict[str, Dependency] = {}
    for line, origin in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            log.debug("skipping requirement %r", line)
            continue
        name = normalize(req.name)
        if name in recipe.drop or (req.marker is not None and not req.marker.evaluate({**env, "extra": ""})):
            continue
        req.marker = None
        out.setdefault(name, Dependency(str(req), origin))
    if "pytest" not in out:
        out["pytest"] = Dependency(recipe.pytest, "default")
    return list(out.values())


def inferred(files: Mapping[str, bytes], layout: Layout) -> Iterator[tuple[str, str]]:
    """Requirements the suite shows it needs: config plugins, test imports, fixtures, own metadata."""
    for plugin in layout.config.plugins:
        yield plugin, f"inferred: pytest config ({layout.config.file})"
    local = _local_modules(files)
    conftests = [p for p in files if p.endswith("conftest.py")]
    for path in (*layout.test_files, *conftests):
        for name in sorted(_imports(files[path]) - local):
            if name not in sys.stdlib_module_names and name not in ("pytest", "_pytest"):  # pinned by default
                yield IMPORT_TO_DIST.get(name, name), f"inferred: imported by {path}"
        if re.search(rb"\bdef test\w*\([^)]*\bmocker\b", files[path]):
            yield "pytest-mock", f"inferred: the mocker fixture in {path}"
    own = next((p for p in layout.source_files if _VERSION_READ.search(files[p])), None)
    if own is not None and (meta := _name_version(files.get("PKG-INFO", b""))):
        yield meta, f"inferred: {own} reads the installed package's metadata"


def _imports(data: bytes) -> set[str]:
    """Top-level names imported at module level, outside try/if blocks (optional imports are not needs)."""
    try:
        tree = parse(data)
    except (SyntaxError, ValueError):
        return set()
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
    return out


def _local_modules(files: Mapping[str, bytes]) -> set[str]:
    """Every module or package name the sdist itself provides (any folder or .py file name)."""
    out = set()
    for path in files:
        if path.endswith(".py"):
            parts = path.removesuffix(".py").split("/")
            out.update(parts)
    return out


def _name_version(raw: bytes) -> str:
    if not raw:
        return ""
    msg = email.parser.BytesParser().parsebytes(raw, headersonly=True)
    name, version = msg.get("Name"), msg.get("Version")
    return f"{name}=={version}" if name and version else ""


def _pkg_info(raw: bytes, env: Mapping[str, str]) -> list[str]:
    if not raw:
        return []
    msg = email.parser.BytesParser().parsebytes(raw, headersonly=True)
    out = []
    for line in msg.get_all("Requires-Dist") or []:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is None:
            out.append(line)
            continue
        for extra in ("", *TEST_EXTRAS):
            if req.marker.evaluate({**env, "extra": extra}):
                req.marker = None
                out.append(str(req))
                break
    return out


def _dependency_groups(raw: bytes) -> list[str]:
    if not raw:
        return []
    try:
        data = tomllib.loads(raw.decode("utf-8", errors="replace"))
    except tomllib.TOMLDecodeError:
        return []
    groups = data.get("dependency-groups") or {}
    return [item for g in TEST_EXTRAS for item in groups.get(g, []) if isinstance(item, str)]


def _requirement_lines(text: str) -> Iterable[str]:
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if line and not line.startswith(("#", "-", "git+", "http:", "https:", ".")):
            yield line
