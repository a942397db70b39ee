"""Test dependencies of an unpacked sdist: what the test environment installs from the host wheelhouse.

Read, in order: the runtime requirements and the ``test``/``tests``/``testing`` extras in ``PKG-INFO``
(markers evaluated for the base image's Python), ``[dependency-groups]`` of the same names in
``pyproject.toml`` (plain strings only), ``requirements-test*.txt`` / ``requirements/test*.txt`` (plain
requirement lines only), then the recipe's ``packages``. Names in the recipe's ``drop`` list (linters,
type checkers, coverage) are left out, and the recipe's pytest pin is added when nothing names pytest.
"""

from __future__ import annotations

import email.parser
import logging
import re
import tomllib
from collections.abc import Iterable, Mapping

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement

from .recipe import Recipe, normalize

log = logging.getLogger(__name__)

TEST_EXTRAS = ("test", "tests", "testing")
_REQ_FILE = re.compile(r"^(requirements[-_/])?(test|tests|testing|dev-test)[\w-]*\.(txt|in)$|"
                       r"^requirements[-_](test|tests|testing)[\w-]*\.(txt|in)$")


def test_requirements(files: Mapping[str, bytes], recipe: Recipe, python: str) -> tuple[str, ...]:
    """Sorted, deduplicated pip requirement lines for running the project's tests."""
    env = {**default_environment(), "python_version": python, "python_full_version": f"{python}.0"}
    lines: list[str] = []
    lines += _pkg_info(files.get("PKG-INFO", b""), env)
    lines += _dependency_groups(files.get("pyproject.toml", b""))
    for path in sorted(files):
        if _REQ_FILE.match(path):
            lines += _requirement_lines(files[path].decode("utf-8", errors="replace"))
    lines += recipe.packages
    out: dict[str, str] = {}
    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            log.debug("skipping requirement %r", line)
            continue
        name = normalize(req.name)
        if name in recipe.drop or (req.marker is not None and not req.marker.evaluate({**env, "extra": ""})):
            continue
        req.marker = None
        out.setdefault(name, str(req))
    if "pytest" not in out:
        out["pytest"] = recipe.pytest
    return tuple(sorted(out.values(), key=str.lower))


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
