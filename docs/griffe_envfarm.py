"""A griffe extension for the API reference: the folders pyproject.toml maps into ``envfarm.*``.

setuptools installs ``envs/`` as ``envfarm.envs`` (and so on) through ``[tool.setuptools.package-dir]``;
griffe finds only the top-level ``envfarm/`` folder of an editable install. When griffe has visited
``envfarm/__init__.py``, this loads each mapped folder statically (nothing is imported) as a subpackage of
``envfarm``, so ``::: envfarm.envs.core`` works in the docs and every path reads as users import it.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path
from typing import Any

from griffe import Extension, GriffeLoader, Module, Visitor

ROOT = Path(__file__).resolve().parents[1]


def mapped_packages(pyproject: Path = ROOT / "pyproject.toml") -> dict[str, Path]:
    """``{"envs": ROOT/"envs", ...}``: the Python packages pyproject.toml maps under ``envfarm``."""
    table = tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"]["setuptools"]["package-dir"]
    found = {}
    for dotted, folder in table.items():
        parent, _, name = dotted.rpartition(".")
        path = ROOT / folder
        if parent == "envfarm" and (path / "__init__.py").is_file():
            found[name] = path
    return found


class EnvfarmPackages(Extension):
    """Attach the mapped folders to the ``envfarm`` package as griffe visits it."""

    def on_module_members(
        self, *, node: ast.AST | Any, mod: Module, agent: Visitor | Any, **kwargs: Any
    ) -> None:
        if mod.path != "envfarm" or not isinstance(agent, Visitor):
            return
        loader = GriffeLoader(
            extensions=agent.extensions,
            docstring_parser=agent.docstring_parser,
            docstring_options=agent.docstring_options,
            lines_collection=agent.lines_collection,
            modules_collection=agent.modules_collection,
        )
        for name, path in mapped_packages().items():
            sub = loader._load_module(name, path / "__init__.py", parent=mod)
            mod.set_member(name, sub)
